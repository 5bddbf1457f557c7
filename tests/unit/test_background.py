"""Background loops stop when asked, even when a round swallows the cancel (farm/background.py).

The swallow is the one CI met: on Python 3.11 a cancel that lands as a Redis client's socket timeout expires
comes out of the round as a TimeoutError, which the loop reports and sleeps on."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest

from farm.background import raise_if_stopping, stop_all


async def round_losing_its_first_cancel(rounds: list[int]) -> None:
    """A round whose cancel becomes an ordinary error, as the timeout race makes it (once: the race is
    rare); later rounds are short Redis calls."""
    if len(rounds) > 1:
        await asyncio.sleep(0.01)
        return
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        raise TimeoutError("socket timeout") from None


async def reporting_loop(rounds: list[int], checks: bool) -> None:
    while True:
        if checks:
            raise_if_stopping()
        rounds.append(1)
        with contextlib.suppress(Exception):  # "round failed; retrying"
            await round_losing_its_first_cancel(rounds)
        await asyncio.sleep(0.5)


def test_a_loop_that_checks_ends_at_its_next_round() -> None:
    async def scenario() -> tuple[bool, int]:
        rounds: list[int] = []
        task = asyncio.create_task(reporting_loop(rounds, checks=True))
        await asyncio.sleep(0.05)
        task.cancel()
        await asyncio.wait([task], timeout=5)
        return task.cancelled(), len(rounds)

    cancelled, rounds = asyncio.run(scenario())
    assert cancelled and rounds == 1


def test_a_plain_cancel_is_lost_on_a_loop_that_does_not_check() -> None:
    """The control: one cancel and a wait, as the API's lifespan did, never ends."""

    async def scenario() -> bool:
        task = asyncio.create_task(reporting_loop([], checks=False))
        await asyncio.sleep(0.05)
        task.cancel()
        done, _ = await asyncio.wait([task], timeout=1.5)
        task.cancel()  # ends it: this cancel is not lost
        await asyncio.wait([task], timeout=5)
        return bool(done)

    assert asyncio.run(scenario()) is False


def test_stop_all_ends_a_loop_that_does_not_check_by_cancelling_again() -> None:
    async def scenario() -> tuple[bool, float]:
        loop = asyncio.get_running_loop()
        task = asyncio.create_task(reporting_loop([], checks=False))
        await asyncio.sleep(0.05)
        started = loop.time()
        await stop_all([task], grace_s=5)
        return task.cancelled(), loop.time() - started

    cancelled, took = asyncio.run(scenario())
    assert cancelled and took < 2


def test_stop_all_leaves_a_task_that_never_ends_logged(caplog: pytest.LogCaptureFixture) -> None:
    async def stubborn() -> None:
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                continue

    async def scenario() -> bool:
        task = asyncio.create_task(stubborn(), name="stubborn")
        await asyncio.sleep(0)
        await stop_all([task], grace_s=0.5)
        alive = not task.done()
        task.get_coro().close()  # type: ignore[union-attr]
        return alive

    with caplog.at_level(logging.ERROR, logger="farm.background"):
        assert asyncio.run(scenario()) is True
    assert "stubborn did not stop" in caplog.text


def test_stop_all_logs_a_loop_that_had_died_with_an_error(caplog: pytest.LogCaptureFixture) -> None:
    async def broken() -> None:
        raise RuntimeError("round exploded")

    async def scenario() -> None:
        task = asyncio.create_task(broken(), name="broken")
        await asyncio.sleep(0.01)
        await stop_all([task])

    with caplog.at_level(logging.ERROR, logger="farm.background"):
        asyncio.run(scenario())
    assert "broken had ended with an error" in caplog.text and "round exploded" in caplog.text
