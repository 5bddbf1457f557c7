"""The tool-using agent loop: sample, parse tool calls, run tools, append results, until a terminal
condition. Recoverable problems (unparseable call, unknown tool, bad arguments, tool error) are fed
back to the policy; terminal ones end the episode and are recorded as its finish reason."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field

from containers.errors import SandboxLimitExceeded
from farm.agent.conversation import TokenConversation
from farm.agent.tools import FunctionTool, ToolError
from farm.agent.versions import PolicyTooStale
from farm.chat.families import CALL_HINTS
from farm.chat.tool_calls import ParsedAssistant, ToolCall
from farm.errors import JobCancelled, JobDeadlineExceeded
from farm.handler.context import JobContext
from farm.inference import ContextOverflow
from farm.models.results import Trace

log = logging.getLogger(__name__)


class AgentConfig(BaseModel):
    max_turns: int = Field(8, ge=1)
    """Policy calls per episode."""
    max_context_tokens: int = Field(8192, ge=64)
    max_observation_chars: int = Field(4000, ge=100)
    finish_tool: str | None = None
    """A tool whose call ends the episode (its arguments become the final answer)."""
    remaining_steps_hint: int = 0
    """When > 0, tell the policy how many turns are left once that few remain."""
    repeated_action_hint: bool = True
    """Warn the policy when it repeats the exact same tool call."""


@dataclass
class Episode:
    conversation: TokenConversation
    finish_reason: str = "answer"
    outcome: Literal["completed", "timeout", "cancelled"] = "completed"
    final_text: str = ""
    turns: int = 0
    tool_calls: int = 0
    recoverable_errors: list[str] = field(default_factory=list)


def episode_trace(ctx: JobContext, handler: str, episode: Episode, **extra: Any) -> Trace:
    """The episode as a token-faithful trace, with the metadata every agent-loop handler records."""
    backends = ctx.policy.backends_used
    meta = {
        "job_id": ctx.job_id,
        "task_id": ctx.spec.task_id,
        "handler": handler,
        **extra,
        "builder": "agent_loop",
        "backend": backends[-1] if backends else None,
        "backends": backends,
        "turns": episode.turns,
        "tool_calls": episode.tool_calls,
        "recoverable_errors": episode.recoverable_errors,
        "policy_version": ctx.metadata.get("policy_version"),
        **ctx.policy.versions.metadata(),
        "tokenizer": episode.conversation.tokenizer.source,
    }
    return episode.conversation.to_trace(episode.finish_reason, meta)


def call_seed(job_id: str, base: int | None, turn: int) -> int:
    """Reproducible per-call seed: the caller's seed, else one derived from the job id."""
    root = base if base is not None else int.from_bytes(hashlib.sha256(job_id.encode()).digest()[:4], "big")
    return (root + turn) % (2**31)


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[output truncated: {len(text) - limit} more characters not shown]"


@dataclass
class _Turn:
    """One episode's fixed inputs and what it has seen, shared by its turns."""

    ctx: JobContext
    config: AgentConfig
    tools: dict[str, FunctionTool]
    sampling: dict[str, Any]
    per_call_max: int
    seen_calls: set[str] = field(default_factory=set)


def run_agent(
    ctx: JobContext,
    messages: list[dict[str, Any]],
    tools: list[FunctionTool],
    config: AgentConfig,
) -> Episode:
    conv = TokenConversation(ctx.tokenizer, messages, [t.schema for t in tools])
    episode = Episode(conversation=conv)
    sampling = ctx.spec.sampling_params.model_dump(exclude_none=True)
    per_call_max = int(sampling.pop("max_tokens", 1024))
    turn = _Turn(ctx, config, {t.name: t for t in tools}, sampling, per_call_max)
    try:
        while _take_turn(turn, episode):
            pass
    except PolicyTooStale:
        episode.finish_reason, episode.outcome = "stale_policy", "cancelled"
    except JobCancelled:
        episode.finish_reason, episode.outcome = "cancelled", "cancelled"
    except JobDeadlineExceeded:
        episode.finish_reason, episode.outcome = "deadline", "timeout"
    return episode


def _take_turn(turn: _Turn, episode: Episode) -> bool:
    """Sample once and answer the tool calls; False when the episode has ended (its finish reason set)."""
    ctx, config, conv = turn.ctx, turn.config, episode.conversation
    ctx.check()
    room = config.max_context_tokens - len(conv)
    if room <= 0:
        episode.finish_reason = "context_window"
        return False
    params = {
        **turn.sampling,
        "max_tokens": min(turn.per_call_max, room),
        "seed": call_seed(ctx.job_id, ctx.spec.sampling_params.seed, episode.turns),
    }
    try:
        generation = ctx.policy.generate(conv.context_ids, params)
    except ContextOverflow:
        episode.finish_reason = "context_window"
        return False
    episode.turns += 1
    parsed = ctx.tokenizer.parse_assistant(ctx.tokenizer.decode(generation.token_ids))
    conv.add_sampled(generation, _assistant_message(parsed))
    if not parsed.tool_calls and not parsed.errors:
        episode.final_text = parsed.content
        episode.finish_reason = "answer" if generation.finish_reason != "length" else "length"
        return False
    finish = next((c for c in parsed.tool_calls if config.finish_tool and c.name == config.finish_tool), None)
    replies = _tool_replies(turn, episode, parsed.tool_calls[: parsed.tool_calls.index(finish)] if finish
                            else parsed.tool_calls)  # fmt: skip
    if finish is not None:
        episode.final_text = json.dumps(finish.arguments)
        episode.finish_reason = "finish_tool"
        return False
    for error in parsed.errors:
        episode.recoverable_errors.append(f"parse: {error}")
        hint = f"{CALL_HINTS[ctx.tokenizer.family]} with valid JSON."
        replies.append(
            {"role": "user", "content": f"Your tool call could not be parsed ({error}). Emit {hint}"}
        )
    left = config.max_turns - episode.turns
    if left <= 0:
        episode.finish_reason = "max_turns"
        return False
    if config.remaining_steps_hint and left <= config.remaining_steps_hint:
        replies.append({"role": "user", "content": f"[{left} turn(s) left; give your final answer soon]"})
    conv.add_messages(replies)
    return True


def _assistant_message(parsed: ParsedAssistant) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": parsed.content}
    if parsed.reasoning is not None:
        message["reasoning_content"] = parsed.reasoning
    if parsed.tool_calls:
        message["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
            }
            for c in parsed.tool_calls
        ]
    return message


def _tool_replies(turn: _Turn, episode: Episode, calls: list[ToolCall]) -> list[dict[str, Any]]:
    """Runs each call (the ones before a finish-tool call) and returns the tool messages."""
    replies: list[dict[str, Any]] = []
    for call in calls:
        episode.tool_calls += 1
        observation = _run_tool(turn.tools, call.name, call.arguments, episode)
        key = json.dumps([call.name, call.arguments], sort_keys=True)
        if turn.config.repeated_action_hint and key in turn.seen_calls:
            observation += "\n[note: you already made this exact call; try something different]"
        turn.seen_calls.add(key)
        content = _truncate(observation, turn.config.max_observation_chars)
        replies.append({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content})
    return replies


def _run_tool(
    by_name: dict[str, FunctionTool], name: str, arguments: dict[str, Any], episode: Episode
) -> str:
    tool = by_name.get(name)
    if tool is None:
        episode.recoverable_errors.append(f"unknown tool {name!r}")
        return f"Error: no tool named {name!r}. Available tools: {', '.join(sorted(by_name)) or 'none'}."
    try:
        return tool(arguments)
    except ToolError as exc:
        episode.recoverable_errors.append(f"{name}: {exc}")
        return f"Error: {exc}"
    except (JobCancelled, JobDeadlineExceeded, SandboxLimitExceeded):  # the job ends: a resource failure
        raise
    except Exception as exc:  # a tool bug must not end the job: the policy sees the error
        log.exception("tool %s failed", name)
        episode.recoverable_errors.append(f"{name}: {type(exc).__name__}: {exc}")
        return f"Error: the tool failed with {type(exc).__name__}: {exc}"
