"""Redis replies as text: clients made with or without `decode_responses` both reach this code."""

from __future__ import annotations

from typing import Any


def as_text(value: Any) -> str:
    """bytes decoded as UTF-8, anything else as str()."""
    return value.decode() if isinstance(value, bytes) else str(value)


def as_text_or_none(value: Any) -> str | None:
    """as_text, keeping None (a missing hash field or key) as None."""
    return None if value is None else as_text(value)
