"""Moved to farm/handler/registry.py (the farm core owns the registry); kept for imports."""

from farm.handler.registry import ENTRY_POINT_GROUP, UnknownHandler, get_handler, names, prewarm_all, register

__all__ = ["ENTRY_POINT_GROUP", "UnknownHandler", "get_handler", "names", "prewarm_all", "register"]
