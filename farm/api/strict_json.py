"""Request bodies are strict JSON: no non-finite number and no lone surrogate anywhere in them.

Python's json (which FastAPI parses with) accepts `NaN`, `Infinity` and `1e400` (as inf) and lone
`\\ud800` escapes; RFC 8259 has no non-finite numbers, and a lone surrogate cannot be stored, encoded
as UTF-8 or sent on. Anything in a body (fields typed `dict[str, Any]` included) that a pydantic model
would not catch is refused here with a 422 naming where it is, before any route sees it.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# Cheap C-speed scan first: a body with none of these cannot hold a non-finite number or a surrogate
# escape, so the common case never builds a second parse tree. Overflow to inf needs either a 3-digit
# exponent or an integer part of more than 200 digits.
_SUSPECT = re.compile(rb"NaN|Infinity|\d[eE]\+?\d{3}|\d{100}|\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_BODY_METHODS = {"POST", "PUT", "PATCH", "DELETE"}

Loc = tuple[str | int, ...]


def body_errors(body: bytes) -> list[dict[str, Any]]:
    """FastAPI-shaped validation errors for every non-finite number and lone surrogate in `body`
    (empty when there is none, or when the body is not JSON at all: the route reports that)."""
    try:
        body.decode("utf-8")  # RFC 8259 bodies are UTF-8; json.loads would guess and then fail with a 500
    except UnicodeDecodeError as exc:
        return [
            _error(
                "json_invalid",
                ("body", exc.start),
                "The body is not valid UTF-8",
                repr(exc.object[exc.start : exc.end]),
            )
        ]
    if not _SUSPECT.search(body):
        return []
    try:
        document = json.loads(body)
    except ValueError:
        return []
    errors: list[dict[str, Any]] = []
    stack: list[tuple[Loc, Any]] = [(("body",), document)]
    while stack:
        loc, value = stack.pop()
        if isinstance(value, float):
            if not math.isfinite(value):
                errors.append(_error("finite_number", loc, "Input should be a finite number", str(value)))
        elif isinstance(value, str):
            if _SURROGATE.search(value):
                errors.append(
                    _error("string_unicode", loc, "Input contains a lone surrogate", _escaped(value))
                )
        elif isinstance(value, dict):
            for key, item in value.items():
                if _SURROGATE.search(key):
                    errors.append(
                        _error("string_unicode", loc, "A key contains a lone surrogate", _escaped(key))
                    )
                    continue
                stack.append(((*loc, key), item))
        elif isinstance(value, list):
            stack.extend(((*loc, i), item) for i, item in enumerate(value))
    return sorted(errors, key=lambda e: [str(part) for part in e["loc"]])


def _error(kind: str, loc: Loc, msg: str, given: str) -> dict[str, Any]:
    return {"type": kind, "loc": list(loc), "msg": msg, "input": given}


def _escaped(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace")[:200]


def _is_json(scope: Scope) -> bool:
    """The bodies FastAPI would parse as JSON: no content type, or application/json or */*+json."""
    content_type = dict(scope["headers"]).get(b"content-type")
    if content_type is None:
        return True
    media = content_type.split(b";", 1)[0].strip().lower()
    return bool(media == b"application/json" or media.endswith(b"+json"))


class StrictJSONBody:
    """Plain ASGI: reads a JSON body, checks it, and replays it to the app unchanged."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in _BODY_METHODS or not _is_json(scope):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                await self.app(scope, _replay([message], receive), send)
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        errors = body_errors(body)
        if errors:
            await JSONResponse({"detail": errors}, status_code=422)(scope, receive, send)
            return
        await self.app(
            scope, _replay([{"type": "http.request", "body": body, "more_body": False}], receive), send
        )


def _replay(messages: list[Message], receive: Receive) -> Receive:
    pending = list(messages)

    async def replayed() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed
