"""Server-sent event framing."""

from __future__ import annotations

import json
from typing import Any


def sse_data(payload: dict[str, Any] | str, end: str = "\n\n") -> str:
    """`end="\r\n\r\n"` for Google, whose servers terminate events with CRLF pairs."""
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}{end}"


def sse_event(event: str, payload: dict[str, Any]) -> str:
    return f"event: {event}\ndata: {json.dumps(payload, separators=(',', ':'))}\n\n"
