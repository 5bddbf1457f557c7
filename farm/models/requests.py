"""Request bodies of the management API (docs/CONTRACT.md "Management API")."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator, model_validator

from farm.chat.families import resolve_parser
from farm.inference import sampling_keys


class SamplingParams(BaseModel):
    """Passed to the inference backend. Further keys are those vLLM or SGLang accept (e.g. `top_k`,
    `min_p`, SGLang's `regex`), under vLLM's names, translated for SGLang backends; any other key is
    refused (farm/inference/sampling_keys.py)."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)

    @model_validator(mode="after")
    def _known_keys(self) -> SamplingParams:
        sampling_keys.check_known(self.model_extra or {})  # a ValueError naming sampling_params.<key>
        return self

    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int = Field(1024, ge=1)
    """Per LLM call."""
    seed: int | None = None
    stop: list[str] | None = None


def check_min_policy_version(metadata: dict[str, Any]) -> None:
    """`metadata.min_policy_version`, when given, is a non-negative int: the job uses only backends
    registered as serving that policy version or a newer one."""
    value = metadata.get("min_policy_version")
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
        raise ValueError("metadata.min_policy_version must be a non-negative integer")


class ProcessRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    instance: dict[str, Any]
    """Always has `handler`; the rest is validated by that handler's instance model."""
    sampling_params: SamplingParams = Field(default_factory=SamplingParams)
    job_id: str | None = Field(None, min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._:@-]+$")
    timeout_s: float | None = Field(None, gt=0)
    """Budget for time inside stages; time spent queued does not count."""
    wait: bool = True

    @field_validator("metadata")
    @classmethod
    def _min_policy_version(cls, metadata: dict[str, Any]) -> dict[str, Any]:
        check_min_policy_version(metadata)
        return metadata

    metadata: dict[str, Any] = Field(default_factory=dict)
    """Copied onto the result and every trace (e.g. policy_version, group_id). `tool_call_parser`
    names the tool-call parser for this job (as in AddLLMServerRequest), over the backend's.
    `min_policy_version` makes the job use only backends serving that version or newer."""

    @field_validator("metadata")
    @classmethod
    def _known_parser(cls, metadata: dict[str, Any]) -> dict[str, Any]:
        metadata = parser_metadata(metadata)
        return metadata

    callback_url: str | None = Field(None, pattern=r"^https?://")
    """When set, the result is also POSTed there (retried with backoff; never blocks the pipeline)."""
    priority: int = Field(0, ge=0, le=9)
    """0 (normal) to 9 (most urgent): init takes more urgent jobs first. Jobs re-sent after a worker
    was lost go first of all."""


def parser_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    """A job's (or task's) metadata with its parser names made canonical: `tool_call_parser` (the parser
    to run) and `required_tool_call_parser` (the only parser the job may run: an evaluation pinned to its
    training run's parser). A ValueError (a 422) for an unknown name, or for two names that disagree."""
    for key in ("tool_call_parser", "required_tool_call_parser"):
        parser = metadata.get(key)
        if parser is not None:
            if not isinstance(parser, str):
                raise ValueError(f"metadata.{key} must be a parser name")
            metadata = {**metadata, key: resolve_parser(parser)}
    named, required = metadata.get("tool_call_parser"), metadata.get("required_tool_call_parser")
    if named is not None and required is not None and named != required:
        raise ValueError(
            f"metadata.tool_call_parser `{named}` is not the required_tool_call_parser `{required}`: "
            "the job would run a parser other than the one it requires"
        )
    return metadata


class CancelRequest(BaseModel):
    job_id: str | None = None
    task_id: str | None = None
    group_id: str | None = None
    older_than_policy_version: StrictInt | None = None
    """Cancel every active job whose metadata.policy_version is lower (stale-job cleanup)."""

    @model_validator(mode="after")
    def _needs_a_selector(self) -> CancelRequest:
        """`{}` selects nothing: a 422 naming the selectors, not a 200 that cancelled nothing."""
        if all(getattr(self, name) is None for name in SELECTORS):
            raise ValueError(f"give at least one selector: {', '.join(SELECTORS)}")
        return self


SELECTORS = ("job_id", "task_id", "group_id", "older_than_policy_version")


class RemoveLLMServerRequest(BaseModel):
    address: str = Field(min_length=1, examples=["http://127.0.0.1:8001/v1"])


class AddLLMServerRequest(BaseModel):
    address: str = Field(min_length=1, examples=["http://127.0.0.1:8001/v1"])
    weight: int = Field(1, ge=1)
    kind: Literal["vllm", "sglang"] = "vllm"
    """Which wire protocol the backend speaks: vLLM /v1/completions or SGLang /generate."""
    policy_version: StrictInt | None = Field(None, ge=0)
    """The trainer's version of the weights it serves. Adding a registered address again with a new version
    updates it in place (a weight publish): jobs stay pinned, nothing is cleared, and every model call after
    it is recorded with this version."""
    tool_call_parser: str | None = None
    """How the model behind it writes tool calls, as its server's `--tool-call-parser` names it
    (`hermes`, `llama3_json`, `pythonic`, `mistral`, `qwen3_coder`, `deepseek_v3`, `deepseek_v31`,
    `glm45`, `kimi_k2`, or SGLang's aliases); None: FARM_TOOL_CALL_PARSER, else the tokenizer's guess."""

    @field_validator("tool_call_parser")
    @classmethod
    def _known_parser(cls, value: str | None) -> str | None:
        return None if value is None else resolve_parser(value)
