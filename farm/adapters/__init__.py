"""Converters from farm results to the batch formats of common trainers; no trainer import needed."""

from farm.adapters.nemo_rl import message_log, to_nemo_rl
from farm.adapters.samples import TrainSample, engine_stop_reason, flatten, infrastructure_failures
from farm.adapters.sft import IGNORE_INDEX, to_sft_records, write_jsonl
from farm.adapters.skyrl import TrajectoryID, to_skyrl
from farm.adapters.slime import SlimeSample, SlimeStatus, to_slime_groups, to_slime_samples
from farm.adapters.termination import TerminationRules
from farm.adapters.verl import to_verl

__all__ = [
    "IGNORE_INDEX",
    "SlimeSample",
    "SlimeStatus",
    "TerminationRules",
    "TrainSample",
    "TrajectoryID",
    "engine_stop_reason",
    "flatten",
    "infrastructure_failures",
    "message_log",
    "to_nemo_rl",
    "to_sft_records",
    "to_skyrl",
    "to_slime_groups",
    "to_slime_samples",
    "to_verl",
    "write_jsonl",
]
