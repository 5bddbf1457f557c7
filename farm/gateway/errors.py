"""Gateway failures, independent of provider; each translator renders them in its own error shape."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import NamedTuple

from farm.inference.errors import is_context_overflow

__all__ = ["ErrorKind", "ErrorNames", "GatewayError", "context_overflow_from", "is_context_overflow"]


class ErrorKind(StrEnum):
    invalid_request = "invalid_request"
    context_overflow = "context_overflow"
    not_found = "not_found"
    conflict = "conflict"
    unauthorized = "unauthorized"
    upstream = "upstream"
    unavailable = "unavailable"
    timeout = "timeout"


class ErrorNames(NamedTuple):
    """What HTTP and each API call an error kind."""

    status: int
    openai: str
    anthropic: str
    google: str


# An error kind's HTTP status, OpenAI error type, Anthropic error type and Google status.
_ROWS: dict[ErrorKind, tuple[int, str, str, str]] = {
    ErrorKind.invalid_request: (400, "invalid_request_error", "invalid_request_error", "INVALID_ARGUMENT"),
    ErrorKind.context_overflow: (400, "invalid_request_error", "invalid_request_error", "INVALID_ARGUMENT"),
    ErrorKind.not_found: (404, "not_found_error", "not_found_error", "NOT_FOUND"),
    ErrorKind.conflict: (409, "invalid_request_error", "invalid_request_error", "FAILED_PRECONDITION"),
    ErrorKind.unauthorized: (401, "authentication_error", "authentication_error", "UNAUTHENTICATED"),
    ErrorKind.upstream: (502, "api_error", "api_error", "INTERNAL"),
    ErrorKind.unavailable: (503, "api_error", "overloaded_error", "UNAVAILABLE"),
    ErrorKind.timeout: (504, "api_error", "timeout_error", "DEADLINE_EXCEEDED"),
}
_NAMES = {kind: ErrorNames(*row) for kind, row in _ROWS.items()}


class GatewayError(Exception):
    def __init__(
        self,
        kind: ErrorKind,
        message: str,
        *,
        prompt_tokens: int | None = None,
        max_tokens: int | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens

    @property
    def names(self) -> ErrorNames:
        return _NAMES[self.kind]

    @property
    def status(self) -> int:
        return self.names.status


def context_overflow_from(message: str) -> GatewayError:
    """Pull the token counts out of vLLM's wording ("maximum context length is M ... requested N")."""
    numbers = [int(n) for n in re.findall(r"\d+", message)]
    limit = numbers[0] if numbers else None
    requested = max(numbers[1:], default=None) if len(numbers) > 1 else None
    return GatewayError(ErrorKind.context_overflow, message, prompt_tokens=requested, max_tokens=limit)
