"""Trajectory builders: recorded completions in, token-faithful `Trace`s out."""

from farm.builders.per_request import build_per_request
from farm.builders.prefix_merging import build_prefix_merging, detect_end_of_turn, group_chains
from farm.builders.records import CompletionRecord, CompletionTimings
from farm.builders.registry import ALIASES, build_traces, builder_names, register_builder
from farm.builders.rewards import discount_rewards

__all__ = [
    "ALIASES",
    "CompletionRecord",
    "CompletionTimings",
    "build_per_request",
    "build_prefix_merging",
    "build_traces",
    "builder_names",
    "detect_end_of_turn",
    "discount_rewards",
    "group_chains",
    "register_builder",
]
