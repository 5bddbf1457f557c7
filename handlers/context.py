"""Moved to farm/handler/context.py (the farm core owns the job context); kept for imports."""

from farm.handler.context import JobContext

__all__ = ["JobContext"]
