"""Waiting for a condition in tests: poll it under a deadline, never sleep a guessed time.

A fixed sleep is either too short under load (the test flakes) or too long when idle (the suite
crawls); polling returns as soon as the condition holds and fails, saying what it waited for and
what it last saw, only when the deadline passes.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import httpx

from bench.common import poll as poll  # one polling loop for the tests and the benches

T = TypeVar("T")

_NOTHING = object()


class WaitTimeout(AssertionError):
    """The condition did not hold within the deadline (an assertion failure of the test)."""


def _timeout(what: str, timeout_s: float, last: object) -> WaitTimeout:
    seen = "nothing (the probe never returned)" if last is _NOTHING else repr(last)
    if len(seen) > 3000:
        seen = seen[:3000] + f"... ({len(seen)} characters)"
    return WaitTimeout(f"timed out after {timeout_s:g}s waiting for {what}; last observed: {seen}")


def wait_until(
    probe: Callable[[], T],
    timeout_s: float,
    *,
    what: str,
    interval_s: float = 0.01,
    accept: Callable[[T], object] = bool,
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """The first value of `probe()` that `accept` takes (by default: the first truthy one).

    Exceptions of the types in `ignore` count as "not yet" (a server still starting); the last one
    is reported if the deadline passes.
    """
    deadline = time.monotonic() + timeout_s
    last: object = _NOTHING
    while True:
        try:
            value = probe()
        except ignore as error:
            last = error
        else:
            if accept(value):
                return value
            last = value
        if time.monotonic() >= deadline:
            raise _timeout(what, timeout_s, last)
        time.sleep(interval_s)


def wait_answering(
    url: str, timeout_s: float, *, what: str, interval_s: float = 0.1, request_s: float = 2
) -> None:
    """Until GET `url` answers 200: a server starting (a refused or dropped connection is "not yet")."""
    wait_until(
        lambda: httpx.get(url, timeout=request_s).status_code == 200,
        timeout_s,
        what=what,
        interval_s=interval_s,
        ignore=(httpx.HTTPError,),
    )


async def wait_until_async(
    probe: Callable[[], T | Awaitable[T]],
    timeout_s: float,
    *,
    what: str,
    interval_s: float = 0.01,
    accept: Callable[[T], object] = bool,
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """`wait_until` for a test running on an event loop; `probe` may be a coroutine function."""
    deadline = time.monotonic() + timeout_s
    last: object = _NOTHING
    while True:
        try:
            value = probe()
            if inspect.isawaitable(value):
                value = await value
        except ignore as error:
            last = error
        else:
            if accept(value):
                return value
            last = value
        if time.monotonic() >= deadline:
            raise _timeout(what, timeout_s, last)
        await asyncio.sleep(interval_s)
