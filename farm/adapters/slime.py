"""Records shaped like slime's `Sample` (slime/utils/types.py), one per trace, without importing slime.

Samples come grouped: every sample of a group is adjacent (slime's GRPO reshapes rewards into
`(-1, n_samples_per_prompt)`). Traces of one job share `rollout_id`, so slime's loss reducer counts a
multi-trace trajectory once; `to_slime_groups` gives the nested prompt x rollout x samples shape.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field

from farm.adapters.samples import Source, TrainSample, flatten
from farm.adapters.termination import TerminationRules
from farm.models import JobState


class SlimeStatus(StrEnum):
    completed = "completed"
    truncated = "truncated"
    aborted = "aborted"


class SlimeSample(BaseModel):
    group_index: int
    index: int
    rollout_id: int
    """The trajectory (job) the trace came from; shared by every trace of that job."""
    prompt: str | list[dict[str, Any]]
    """The prompt messages (slime accepts a string or a message list)."""
    tokens: list[int]
    """Prompt ids followed by response ids."""
    response: str
    response_length: int
    label: str | None = None
    reward: float
    loss_mask: list[int]
    """Over the response tokens only, as slime expects."""
    rollout_log_probs: list[float]
    status: SlimeStatus
    metadata: dict[str, Any] = Field(default_factory=dict)


def to_slime_samples(
    source: Source, *, label_key: str = "answer", termination: TerminationRules | None = None
) -> list[SlimeSample]:
    """`label_key`: the instance/metadata field copied into `label` when present."""
    # stable: trajectories keep order
    ordered = sorted(flatten(source, termination), key=lambda s: s.group_index)
    return [_sample(index, s, label_key) for index, s in enumerate(ordered)]


def to_slime_groups(
    source: Source, *, label_key: str = "answer", termination: TerminationRules | None = None
) -> list[list[list[SlimeSample]]]:
    """What a slime rollout function returns for multi-trace rollouts: prompt x rollout x samples."""
    groups: dict[int, dict[int, list[SlimeSample]]] = {}
    for sample in to_slime_samples(source, label_key=label_key, termination=termination):
        groups.setdefault(sample.group_index, {}).setdefault(sample.rollout_id, []).append(sample)
    return [list(rollouts.values()) for rollouts in groups.values()]


def _status(sample: TrainSample) -> SlimeStatus:
    if sample.state in (JobState.failed, JobState.cancelled, JobState.timeout):
        return SlimeStatus.aborted
    return SlimeStatus.truncated if sample.truncated else SlimeStatus.completed


def _sample(index: int, sample: TrainSample, label_key: str) -> SlimeSample:
    trace = sample.trace
    response_text = "".join(
        str(m.get("content") or "") for m in trace.response_messages if m.get("role") == "assistant"
    )
    label = trace.metadata.get(label_key)
    return SlimeSample(
        group_index=sample.group_index,
        index=index,
        rollout_id=sample.trajectory_index,
        prompt=list(trace.prompt_messages),
        tokens=[*trace.prompt_ids, *trace.response_ids],
        response=response_text,
        response_length=len(trace.response_ids),
        label=None if label is None else str(label),
        reward=sample.reward,
        loss_mask=list(trace.loss_mask),
        rollout_log_probs=list(trace.response_logprobs),
        status=_status(sample),
        metadata={**trace.metadata, "group_id": sample.group_id, "job_id": sample.job_id},
    )
