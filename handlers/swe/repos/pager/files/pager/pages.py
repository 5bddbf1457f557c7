"""Splitting a sequence into numbered pages (1-based)."""

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def page_count(total: int, per_page: int) -> int:
    """How many pages `total` items fill at `per_page` items per page."""
    if per_page < 1:
        raise ValueError("per_page must be at least 1")
    return total // per_page


def paginate(items: Sequence[T], page: int, per_page: int = 10) -> list[T]:
    """The items on page `page`; an empty sequence has one empty page."""
    last = max(page_count(len(items), per_page), 1)
    if not 1 <= page <= last:
        raise ValueError(f"page {page} is out of range 1..{last}")
    start = (page - 1) * per_page
    return list(items[start : start + per_page])
