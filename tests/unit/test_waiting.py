"""tests/waiting.py: polling returns as soon as the condition holds and fails naming what it waited for."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from tests.waiting import WaitTimeout, poll, wait_until, wait_until_async


def test_returns_the_first_accepted_value_without_waiting_longer() -> None:
    counter = itertools.count()
    started = time.monotonic()
    assert wait_until(lambda: next(counter), 5, what="a count of 3", accept=lambda n: n >= 3) == 3
    assert time.monotonic() - started < 1.0


def test_a_timeout_names_what_and_the_last_value_seen() -> None:
    with pytest.raises(WaitTimeout, match=r"waiting for the queue to drain; last observed: \[1, 2\]"):
        wait_until(lambda: [1, 2], 0.05, what="the queue to drain", accept=lambda q: q == [])
    with pytest.raises(AssertionError):  # a failed wait fails the test like an assert
        wait_until(lambda: False, 0.01, what="never")


def test_ignored_errors_are_not_yet_and_others_propagate_at_once() -> None:
    calls = itertools.count()

    def starting() -> str:
        if next(calls) < 2:
            raise ConnectionError("refused")
        return "up"

    assert wait_until(starting, 5, what="the server", ignore=(ConnectionError,)) == "up"

    def refusing() -> str:
        raise ConnectionError("refused")

    with pytest.raises(WaitTimeout, match=r"last observed: ConnectionError\('refused'\)"):
        wait_until(refusing, 0.05, what="the server", ignore=(OSError,))
    started = time.monotonic()
    with pytest.raises(KeyError):
        wait_until(lambda: {}["missing"], 5, what="a key")
    assert time.monotonic() - started < 1.0


def test_a_long_last_value_is_cut() -> None:
    with pytest.raises(WaitTimeout) as caught:
        wait_until(lambda: "x" * 10_000, 0.01, what="short", accept=lambda s: len(s) < 10)
    assert len(str(caught.value)) < 3200 and "10002 characters" in str(caught.value)


def test_poll_returns_the_last_value_when_time_runs_out() -> None:
    counter = itertools.count()
    assert poll(lambda: next(counter), 5, accept=lambda n: n == 2) == 2
    assert poll(lambda: "still running", 0.02) == "still running"
    assert poll(lambda: "", 0.02) == ""


def test_the_async_twin_awaits_coroutine_probes() -> None:
    counter = itertools.count()

    async def probe() -> int:
        return next(counter)

    async def main() -> int:
        return await wait_until_async(probe, 5, what="3", accept=lambda n: n >= 3)

    assert asyncio.run(main()) == 3
    with pytest.raises(WaitTimeout, match="waiting for ready; last observed: 'no'"):
        asyncio.run(wait_until_async(lambda: "no", 0.02, what="ready", accept=lambda s: s == "yes"))
