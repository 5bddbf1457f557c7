"""Parsing and ordering MAJOR.MINOR.PATCH version strings."""

from collections.abc import Iterable


def parse(version: str) -> tuple[str, ...]:
    """The version's components, in order of significance."""
    parts = version.strip().split(".")
    if len(parts) != 3 or not all(part.isdigit() for part in parts):
        raise ValueError(f"not a MAJOR.MINOR.PATCH version: {version!r}")
    return tuple(parts)


def compare(a: str, b: str) -> int:
    """-1, 0 or 1 as `a` is older than, the same as, or newer than `b`."""
    left, right = parse(a), parse(b)
    return (left > right) - (left < right)


def latest(versions: Iterable[str]) -> str:
    """The newest of the given versions."""
    return max(versions, key=parse)
