"""Token-in/token-out inference: one call sends prompt ids and gets back sampled ids with logprobs."""

from farm.inference.backend import AsyncBackendClient, BackendClient
from farm.inference.errors import (
    BackendRejected,
    BackendUnavailable,
    BadBackendResponse,
    CallDeadlineExceeded,
    ContextOverflow,
    InferenceError,
)
from farm.inference.generation import FinishReason, Generation
from farm.inference.wire import BackendKind

__all__ = [
    "AsyncBackendClient",
    "BackendClient",
    "BackendKind",
    "BackendRejected",
    "BackendUnavailable",
    "BadBackendResponse",
    "CallDeadlineExceeded",
    "ContextOverflow",
    "FinishReason",
    "Generation",
    "InferenceError",
]
