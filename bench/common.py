"""Small helpers shared by the bench scripts."""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import TypeVar

import httpx

T = TypeVar("T")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def median(values: list[float]) -> float:
    return statistics.median(values)


def parse_quick(parser: argparse.ArgumentParser, **sizes: object) -> argparse.Namespace:
    """parse_args with a `--quick` flag: a CI-sized run (`sizes` replace those arguments), minutes at
    most on a loaded 2-core machine, for checking a bench still runs, not for its figures."""
    shown = ", ".join(f"--{name.replace('_', '-')} {value}" for name, value in sizes.items())
    parser.add_argument("--quick", action="store_true", help=f"a CI-sized run: {shown}")
    args = parser.parse_args()
    if args.quick:
        for name, value in sizes.items():
            setattr(args, name, value)
    return args


def poll(
    probe: Callable[[], T],
    timeout_s: float,
    *,
    accept: Callable[[T], object] = bool,
    interval_s: float = 0.01,
) -> T:
    """The first value of `probe()` that `accept` takes, or the last one seen once the deadline passes:
    for callers that report a timeout themselves, with more than the value (tests/waiting.py's
    `wait_until` raises)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if accept(value) or time.monotonic() >= deadline:
            return value
        time.sleep(interval_s)


def wait_answering(url: str, timeout_s: float, *, what: str, request_s: float = 2) -> None:
    """Until GET `url` answers 200 (a server starting: a refused or dropped connection is "not yet");
    TimeoutError naming `what` past `timeout_s`."""

    def answers() -> bool:
        try:
            return httpx.get(url, timeout=request_s).status_code == 200
        except httpx.HTTPError:
            return False

    if not poll(answers, timeout_s, interval_s=0.1):
        raise TimeoutError(f"{what}: {url} did not answer within {timeout_s:.0f} s")
