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
from typing import Generic, TypeVar

import httpx

from bench.common import poll as poll  # one polling loop for the tests and the benches

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """The condition did not hold within the deadline (an assertion failure of the test)."""


class _Waiting(Generic[T]):
    """One wait: its deadline, and what `accept` is to take; the value taken is kept in `value`."""

    value: T

    def __init__(
        self,
        what: str,
        timeout_s: float,
        accept: Callable[[T], object],
        ignore: tuple[type[BaseException], ...],
    ) -> None:
        self.what, self.timeout_s, self.accept, self.ignore = what, timeout_s, accept, ignore
        self.deadline = time.monotonic() + timeout_s

    def tried(self, probe: Callable[[], T]) -> bool:
        """Whether `probe()` gave a value `accept` takes; else, once the deadline has passed, WaitTimeout
        with what it gave (an error of the `ignore` types, or the value refused)."""
        try:
            value = probe()
        except self.ignore as error:
            last: object = error
        else:
            if self.accept(value):
                self.value = value
                return True
            last = value
        if time.monotonic() >= self.deadline:
            seen = repr(last)
            if len(seen) > 3000:
                seen = seen[:3000] + f"... ({len(seen)} characters)"
            raise WaitTimeout(
                f"timed out after {self.timeout_s:g}s waiting for {self.what}; last observed: {seen}"
            )
        return False


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
    waiting = _Waiting(what, timeout_s, accept, ignore)
    while not waiting.tried(probe):
        time.sleep(interval_s)
    return waiting.value


def wait_answering(
    url: str,
    timeout_s: float,
    *,
    what: str,
    interval_s: float = 0.1,
    request_s: float = 2,
    auth: tuple[str, str] | None = None,
) -> None:
    """Until GET `url` answers 200: a server starting (a refused or dropped connection is "not yet")."""
    wait_until(
        lambda: httpx.get(url, timeout=request_s, auth=auth).status_code == 200,
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
    waiting = _Waiting(what, timeout_s, accept, ignore)
    while not waiting.tried(await _settled(probe)):
        await asyncio.sleep(interval_s)
    return waiting.value


async def _settled(probe: Callable[[], T | Awaitable[T]]) -> Callable[[], T]:
    """What `probe()` gives, awaited, as a call that returns it or raises what it raised."""
    try:
        value = probe()
        if inspect.isawaitable(value):
            value = await value
    except BaseException as error:
        raised = error

        def again() -> T:
            raise raised

        return again
    return lambda: value
