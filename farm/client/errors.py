"""Errors raised by the farm clients: one base class, so a trainer can catch every farm failure at once."""

from __future__ import annotations

from typing import Any


class FarmError(Exception):
    """The farm answered with an error status (or could not be reached: `status` is None then)."""

    def __init__(self, message: str, *, status: int | None = None, detail: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail
        """The server's `detail` as sent (FastAPI 422s: the list of field errors, kept unchanged)."""


class FarmUnavailable(FarmError):
    """Connection refused, reset or timed out before an answer came."""


class FarmTimeout(FarmError):
    """A client-side wait (`wait`, `as_completed`) ran past its deadline; the jobs keep running."""

    def __init__(self, message: str, *, pending: list[str]) -> None:
        super().__init__(message)
        self.pending = pending
