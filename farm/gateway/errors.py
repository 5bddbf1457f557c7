"""Gateway failures, independent of provider; each translator renders them in its own error shape."""

from __future__ import annotations

import re
from enum import StrEnum

from farm.inference.errors import is_context_overflow

__all__ = ["ErrorKind", "GatewayError", "context_overflow_from", "is_context_overflow"]


class ErrorKind(StrEnum):
    invalid_request = "invalid_request"
    context_overflow = "context_overflow"
    not_found = "not_found"
    conflict = "conflict"
    unauthorized = "unauthorized"
    upstream = "upstream"
    unavailable = "unavailable"
    timeout = "timeout"


_STATUS = {
    ErrorKind.invalid_request: 400,
    ErrorKind.context_overflow: 400,
    ErrorKind.not_found: 404,
    ErrorKind.conflict: 409,
    ErrorKind.unauthorized: 401,
    ErrorKind.upstream: 502,
    ErrorKind.unavailable: 503,
    ErrorKind.timeout: 504,
}


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
    def status(self) -> int:
        return _STATUS[self.kind]


def context_overflow_from(message: str) -> GatewayError:
    """Pull the token counts out of vLLM's wording ("maximum context length is M ... requested N")."""
    numbers = [int(n) for n in re.findall(r"\d+", message)]
    limit = numbers[0] if numbers else None
    requested = max(numbers[1:], default=None) if len(numbers) > 1 else None
    return GatewayError(ErrorKind.context_overflow, message, prompt_tokens=requested, max_tokens=limit)
