"""Builder registry: turn a session's recorded completions into trainer-facing traces."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from farm.builders.per_request import build_per_request
from farm.builders.prefix_merging import build_prefix_merging
from farm.builders.records import CompletionRecord
from farm.builders.rewards import discount_rewards
from farm.models import Trace

Builder = Callable[..., list[Trace]]

_BUILDERS: dict[str, Builder] = {
    "per_request": build_per_request,
    "prefix_merging": build_prefix_merging,
}
# AReaL export styles: `individual` keeps every interaction, `concat` stitches linear conversations.
ALIASES = {"individual": "per_request", "concat": "prefix_merging"}


def register_builder(name: str, builder: Builder) -> None:
    """Add a strategy: `builder(records, metadata=..., **config) -> list[Trace]`."""
    _BUILDERS[name] = builder


def builder_names() -> list[str]:
    return sorted([*_BUILDERS, *ALIASES])


def build_traces(
    strategy: str,
    records: Sequence[CompletionRecord],
    *,
    discount: float | None = None,
    metadata: dict[str, Any] | None = None,
    **config: Any,
) -> list[Trace]:
    """Build traces with `strategy`; with `discount`, rewards are first discounted in insertion order."""
    name = ALIASES.get(strategy, strategy)
    try:
        builder = _BUILDERS[name]
    except KeyError:
        raise ValueError(f"unknown builder {strategy!r}; known: {', '.join(builder_names())}") from None
    ordered = sorted(records, key=lambda r: r.index)
    if discount is not None:
        rewards = discount_rewards([r.reward for r in ordered], discount)
        ordered = [r.model_copy(update={"reward": rw}) for r, rw in zip(ordered, rewards, strict=True)]
    return builder(ordered, metadata=metadata, **config)
