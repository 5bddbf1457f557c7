"""The head of one HTTP/1.x request as the relay accepts it: only shapes every server parses one way.

The relay decides on a request by its path, and the server behind it (uvicorn, with httptools or h11, then
Starlette's router) routes on its own parse of the same bytes. The two agree when the target leaves no room
for interpretation, so anything a parser may read differently is refused rather than normalised:
percent-encoding, dot segments, empty segments, fragments, `;` parameters, backslashes, absolute or
asterisk forms, control or non-ASCII bytes, bare CR or LF, folded or duplicated framing headers. What is
accepted is carried as a head rebuilt from the parse (`render`), never as the bytes the client sent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_TARGET = 8192
"""Longer targets are refused (uvicorn and most proxies stop well before a 64 KiB head anyway)."""
HOP_HEADERS = frozenset({"connection", "keep-alive", "proxy-connection", "upgrade", "te", "trailer"})
PROXY_HEADERS = frozenset({"forwarded", "x-forwarded-for", "x-forwarded-proto", "x-forwarded-host"})
"""uvicorn trusts these from 127.0.0.1, where the relay connects from: never the sandbox's to set."""

_REQUEST_LINE = re.compile(r"([A-Z]{1,20}) (\S+) HTTP/1\.[01]")
_SEGMENT = r"[A-Za-z0-9\-._~!$&'()*+,=:@]+"
_PATH = re.compile(rf"(?:/{_SEGMENT})+/?|/")
_QUERY = re.compile(r"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/?]|%[0-9A-Fa-f]{2})*")
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_FIELD_VALUE = re.compile(r"[\t\x20-\x7e]*")


class MalformedRequest(ValueError):
    """The head is not one the relay can judge the way the server will route it; the message says why."""


@dataclass(frozen=True)
class RequestHead:
    method: str
    path: str
    """The path the server routes on: the target before `?`, exactly (nothing in it is decoded)."""
    query: str | None
    headers: tuple[tuple[str, str], ...]
    """Every header as sent but hop-by-hop and proxy headers."""

    @property
    def target(self) -> str:
        return self.path if self.query is None else f"{self.path}?{self.query}"

    def render(self) -> bytes:
        """The head to send upstream: this request alone, ending its connection (`Connection: close`)."""
        lines = [f"{self.method} {self.target} HTTP/1.1", *(f"{n}: {v}" for n, v in self.headers)]
        return ("\r\n".join([*lines, "connection: close", "", ""])).encode("ascii")


def parse_head(head: bytes) -> RequestHead:
    """`head` is everything before the blank line that ends it (CRLF CRLF excluded)."""
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        raise MalformedRequest("non-ASCII bytes in the request head") from None
    lines = text.split("\r\n")
    if any("\r" in line or "\n" in line for line in lines):
        raise MalformedRequest("a bare CR or LF in the request head")
    line = _REQUEST_LINE.fullmatch(lines[0])
    if line is None:
        raise MalformedRequest("not a request line of the form `METHOD /path HTTP/1.1`")
    method, target = line.groups()
    path, query = _target(target)
    return RequestHead(method, path, query, _headers(lines[1:]))


def _target(target: str) -> tuple[str, str | None]:
    if len(target) > MAX_TARGET:
        raise MalformedRequest(f"request target longer than {MAX_TARGET} characters")
    path, sep, query = target.partition("?")
    if not _PATH.fullmatch(path):
        raise MalformedRequest(
            "the path must be origin-form, plain segments (no %-encoding, `;`, `\\`, `#`, empty segment)"
        )
    if any(segment in (".", "..") for segment in path.split("/")):
        raise MalformedRequest("dot segments in the path")
    if sep and not _QUERY.fullmatch(query):
        raise MalformedRequest("the query has characters outside RFC 3986 (a `#`, a space, a bad %-escape)")
    return path, query if sep else None


def _headers(lines: list[str]) -> tuple[tuple[str, str], ...]:
    kept: list[tuple[str, str]] = []
    framing: dict[str, list[str]] = {"content-length": [], "transfer-encoding": []}
    for line in lines:
        name, colon, value = line.partition(":")
        if not colon or not _TOKEN.fullmatch(name):
            raise MalformedRequest("a header line that is not `name: value` (folded, or a bad name)")
        value = value.strip(" \t")
        if not _FIELD_VALUE.fullmatch(value):
            raise MalformedRequest(f"control characters in the {name} header")
        lower = name.lower()
        if lower in framing:
            framing[lower].append(value)
        if lower not in HOP_HEADERS and lower not in PROXY_HEADERS:
            kept.append((name, value))
    lengths, encodings = framing["content-length"], framing["transfer-encoding"]
    if len(lengths) > 1 or len(encodings) > 1 or (lengths and encodings):
        raise MalformedRequest("ambiguous body framing (several Content-Length / Transfer-Encoding headers)")
    if lengths and not lengths[0].isdigit():
        raise MalformedRequest("Content-Length is not a number")
    if encodings and encodings[0].lower() != "chunked":
        raise MalformedRequest("Transfer-Encoding other than `chunked`")
    return tuple(kept)
