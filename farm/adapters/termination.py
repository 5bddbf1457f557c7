"""What a trainer does with a trajectory by the reason it ended (farm/models/termination.py): mask it
(its tokens train nothing, its reward still counts in its group's baseline) or add a penalty to its
reward. Every adapter takes `termination=TerminationRules(...)`; without it nothing changes.

    TerminationRules(mask_reasons={"context_limit", "oversized_tool_result"},
                     reason_penalty={"max_turns": -0.5, "unparsed_tool_calls": -1.0})
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from farm.models import JobResult, Trace
from farm.models.termination import TerminationReason, reason_for, reason_of

if TYPE_CHECKING:
    from farm.adapters.samples import TrainSample


def _reasons(names: Iterable[str]) -> frozenset[TerminationReason]:
    try:
        return frozenset(TerminationReason(n) for n in names)
    except ValueError as exc:
        known = ", ".join(r.value for r in TerminationReason)
        raise ValueError(f"{exc}; termination reasons are: {known}") from None


@dataclass(frozen=True)
class TerminationRules:
    mask_reasons: frozenset[TerminationReason] = frozenset()
    """Samples that ended with one of these keep their place and reward but train no token: their
    loss mask (and logprobs) become all 0."""
    reason_penalty: Mapping[TerminationReason, float] = field(default_factory=dict)
    """Added to the reward of samples that ended with the reason (e.g. -1.0 for `max_turns`)."""

    def __init__(
        self, mask_reasons: Iterable[str] = (), reason_penalty: Mapping[str, float] | None = None
    ) -> None:
        penalties = dict(reason_penalty or {})
        object.__setattr__(self, "mask_reasons", _reasons(mask_reasons))
        keys = _reasons(penalties)
        object.__setattr__(self, "reason_penalty", {TerminationReason(k): float(penalties[k]) for k in keys})

    def apply(self, sample: TrainSample) -> TrainSample:
        reason = sample.termination_reason
        if reason is None:
            return sample
        reward = sample.reward + self.reason_penalty.get(reason, 0.0)
        trace = sample.trace
        if reason in self.mask_reasons:
            n = len(trace.response_ids)
            trace = trace.model_copy(update={"loss_mask": [0] * n, "response_logprobs": [0.0] * n})
        return replace(sample, trace=trace, reward=reward, masked=reason in self.mask_reasons)


def result_reason(result: JobResult) -> TerminationReason:
    return reason_for(result)


def trace_reason(trace: Trace) -> TerminationReason | None:
    return reason_of(trace.metadata)
