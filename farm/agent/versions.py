"""Which policy version produced each model call of a rollout, and when a rollout is too far behind.

A weight publish aborts nothing: a rollout in flight keeps going (a partial rollout, as AReaL and ROLL run
them) and each of its turns records the version that sampled it. The version comes from the backend when
it says (SGLang's `meta_info.weight_version`, set by the trainer's `update_weights_from_disk`), else from
the pool registration the call was sent under (the trainer re-adds the address with its `policy_version`);
`source` tells which, since a registration read when the call was sent can be one behind a publish that
landed during the call.

A turn that spans a publish (POST /publish_weights paused its backend with the call in flight, or labelled it
while the call ran) is recorded in `turn_version_changes`: `{"turn": k, "from": v, "to": w, "token": i}`,
where `token` is the index in the turn's sampled tokens from which `w` served, or None when the server does
not say (vLLM's answers carry no version: the change is somewhere in the turn). The turn's own entry in
`turn_policy_versions` stays the version it was sent under; an adapter that must not train on mixed tokens
masks the turn from `token` (all of it when None): farm/adapters/version_mask.py.

`max_policy_lag` K (a job's `metadata.max_policy_lag`, else FARM_MAX_POLICY_LAG; unset = always continue)
ends a rollout before its next call when the backend now serves a version more than K past the rollout's
oldest turn: its trace ends with finish_reason `stale_policy`, its state `cancelled`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from farm.errors import JobCancelled

VersionSource = Literal["backend", "pool", "unknown"]


class PolicyTooStale(JobCancelled):
    """The rollout's oldest turn is more than `max_policy_lag` versions behind the backend's weights."""


def parse_version(value: Any) -> int | None:
    """A version as an integer: ints, and strings of digits (SGLang's weight_version is a string)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def resolve_version(reported: Any, registered: int | None) -> tuple[int | None, VersionSource]:
    """The version of one model call: what the backend said it sampled with, else what the pool had
    registered for it when the call was sent, else unknown."""
    from_backend = parse_version(reported)
    if from_backend is not None:
        return from_backend, "backend"
    if registered is not None:
        return registered, "pool"
    return None, "unknown"


def max_lag(metadata: dict[str, Any], default: int | None) -> int | None:
    """The rollout's lag bound: its metadata's `max_policy_lag` when a non-negative int, else the farm's."""
    value = metadata.get("max_policy_lag")
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return default


def min_version(metadata: dict[str, Any]) -> int | None:
    """The oldest policy version a job accepts (its metadata's `min_policy_version`, a non-negative int)."""
    value = metadata.get("min_policy_version")
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


@dataclass
class TurnVersions:
    """The version of each model call of one rollout, in call order."""

    max_lag: int | None = None
    versions: list[int | None] = field(default_factory=list)
    sources: list[VersionSource] = field(default_factory=list)

    def check(self, serving: int | None) -> None:
        """Before a call to a backend serving `serving`: raise PolicyTooStale when the oldest turn is
        more than max_lag versions behind it."""
        known = [v for v in self.versions if v is not None]
        if self.max_lag is None or serving is None or not known:
            return
        oldest = min(known)
        if serving - oldest > self.max_lag:
            raise PolicyTooStale(
                f"the rollout's oldest turn is version {oldest}, the backend serves {serving} "
                f"(more than max_policy_lag={self.max_lag} behind)"
            )

    changes: list[dict[str, Any]] = field(default_factory=list)

    def record(
        self,
        reported: str | None,
        registered: int | None,
        change: tuple[int | None, int | None] | None = None,
    ) -> None:
        """One call's version; `change` (from, to) when its backend's weights may have changed during it
        (spanned_publish)."""
        version, source = resolve_version(reported, registered)
        if change is not None:
            self.changes.append(
                {"turn": len(self.versions), "from": change[0], "to": change[1], "token": None}
            )
        self.versions.append(version)
        self.sources.append(source)

    def metadata(self) -> dict[str, Any]:
        """What a trace carries: one version per model call (the k-th run of loss-mask-1 tokens is the
        k-th call) and where each came from."""
        known = [v for v in self.versions if v is not None]
        return {
            "turn_policy_versions": list(self.versions),
            "turn_policy_version_sources": list(self.sources),
            "policy_version_span": [min(known), max(known)] if known else None,
            **({"turn_version_changes": [dict(c) for c in self.changes]} if self.changes else {}),
        }


def spanned_publish(
    sent: tuple[int | None, int | None], ended: tuple[int | None, int | None] | None
) -> tuple[int | None, int | None] | None:
    """(from, to) when a call's backend may have changed weights while the call ran: a publish was under way
    when it was sent (`publishing` set), or is at its end, or the label changed in between. `sent` and `ended`
    are the backend's (policy_version, publishing) then; None: no change (or the backend left the pool)."""
    if ended is None:
        return None
    sent_version, sent_publishing = sent
    ended_version, ended_publishing = ended
    if sent_publishing is None and ended_publishing is None and ended_version == sent_version:
        return None
    return sent_version, ended_publishing if ended_publishing is not None else ended_version
