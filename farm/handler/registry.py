"""Handlers by name, found through the entry point group `rollout_farm.handlers` (name = the handler's
name, value = `module:Class`), the one way in: the built-ins declare theirs in pyproject.toml like any
third-party package, so the farm core never imports the `handlers` package."""

from __future__ import annotations

import logging
import warnings
from importlib.metadata import entry_points

from farm.handler.protocol import AgentHandler

ENTRY_POINT_GROUP = "rollout_farm.handlers"

log = logging.getLogger(__name__)
_classes: dict[str, type[AgentHandler]] = {}
_instances: dict[str, AgentHandler] = {}
_loaded = False


class UnknownHandler(KeyError):
    def __init__(self, name: str, known: list[str]) -> None:
        super().__init__(name)
        self.name = name
        self.known = known

    def __str__(self) -> str:
        return f"unknown handler {self.name!r}; registered: {', '.join(self.known) or 'none'}"


def register(cls: type[AgentHandler]) -> type[AgentHandler]:
    """Deprecated: a class registered here is known only to the processes that imported its module."""
    warnings.warn(f"register({cls.__name__}): use the {ENTRY_POINT_GROUP} entry point", DeprecationWarning, 2)
    _classes[cls.name] = cls
    return cls


def _load() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in _classes:
            continue
        try:
            cls = ep.load()
            _classes[cls.name] = cls
        except Exception:  # a broken plugin must not take the farm down
            log.exception("could not load handler entry point %s", ep.value)


def names() -> list[str]:
    _load()
    return sorted(_classes)


def prewarm_all(stages: set[str]) -> None:
    """Every registered handler's prewarm for a worker serving `stages`; a failing one is logged."""
    for name in names():
        try:
            get_handler(name).prewarm(stages)
        except Exception:
            log.exception("prewarm of handler %s failed", name)


def get_handler(name: str) -> AgentHandler:
    _load()
    if name not in _instances:
        if name not in _classes:
            raise UnknownHandler(name, sorted(_classes))
        _instances[name] = _classes[name]()
    return _instances[name]
