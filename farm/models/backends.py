"""Inference backends as listed by GET /llm_servers."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class BackendInfo(BaseModel):
    address: str
    kind: Literal["vllm", "sglang"] = "vllm"
    weight: int = 1
    assigned: int = 0
    """Jobs currently pinned to this backend (sticky assignment)."""
    in_flight: int = 0
    """LLM calls currently running against it."""
    healthy: bool = True
    error: str | None = None
    """Why it is unhealthy: its last probe's answer (at registration, then every few seconds) or the
    error of the call that failed on it. None while healthy."""
    policy_version: int | None = None
    """The weight version the trainer last published to it (None: never said)."""
    publishing: int | None = None
    """The version a POST /publish_weights is updating it to right now (None: no publish under way)."""
    tool_call_parser: str | None = None
    """The tool-call parser for the model this backend serves (vLLM/SGLang `--tool-call-parser` names,
    farm/chat/families); None: the farm's setting, else the tokenizer's guess."""
