"""A tiny CSV record splitter."""

from csvlite.split import split_line

__all__ = ["split_line"]
