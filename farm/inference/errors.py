"""What can go wrong when asking an inference backend for tokens, named by what the caller should do."""

from __future__ import annotations

import re

CONTEXT_OVERFLOW = re.compile(
    r"maximum context length|context length|context window|max_model_len|maximum model length"
    r"|longer than the model|exceeds the maximum|prompt is too long|too many tokens|input tokens exceed",
    re.IGNORECASE,
)
"""How vLLM, SGLang and OpenAI-compatible servers word a prompt that does not fit (farm/llm/emulation.py
reproduces the two servers' own messages)."""


def is_context_overflow(message: str) -> bool:
    return bool(CONTEXT_OVERFLOW.search(message))


def retryable_status(status: int) -> bool:
    """A status another backend may answer well: the server's trouble (5xx), a timeout or overload."""
    return status >= 500 or status in (408, 429)


class InferenceError(Exception):
    """Base of every inference failure. `backend` is the address that failed, `status` the HTTP code."""

    def __init__(self, message: str, *, backend: str = "", status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.backend = backend
        self.status = status


class BackendUnavailable(InferenceError):
    """Connect error, timeout, 5xx or 429: the request may be retried on another backend."""


class CallDeadlineExceeded(InferenceError):
    """The job's remaining budget ran out while the backend was still answering: not the backend's
    fault (do not mark it unhealthy or fail over); the job ends as a timeout."""


class ContextOverflow(InferenceError):
    """Prompt plus max_tokens exceed the model's window: retrying will not help; end the episode."""


class BadBackendResponse(InferenceError):
    """The backend answered, but not with aligned token ids and logprobs: never train on such an answer."""


class BackendRejected(InferenceError):
    """The backend refused the request (a 4xx other than context overflow): a caller bug or bad config."""
