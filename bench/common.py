"""Small helpers shared by the bench scripts."""

from __future__ import annotations

import argparse
import statistics


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
