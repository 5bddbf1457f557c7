"""The tool-using agent loop: sample, parse tool calls, run tools, append results, until a terminal
condition. Recoverable problems (unparseable call, unknown tool, bad arguments, tool error) are fed
back to the policy; terminal ones end the episode and are recorded as its finish reason."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

from containers.errors import SandboxLimitExceeded
from farm import keys
from farm.agent.conversation import TokenConversation
from farm.agent.parse_outcomes import TurnParse, classify
from farm.agent.parse_outcomes import counts as parse_counts
from farm.agent.tools import FunctionTool, ToolError
from farm.agent.versions import PolicyTooStale
from farm.chat.families import FORMATS, resolve_parser
from farm.chat.tool_calls import ParsedAssistant, ToolCall
from farm.errors import JobCancelled, JobDeadlineExceeded
from farm.handler.context import JobContext
from farm.inference.errors import ContextOverflow
from farm.models.results import Trace
from farm.settings import get_settings

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
    max_generated_tokens: int | None = Field(None, ge=1)
    """Sampled tokens per trajectory (all turns); None: only the per-call `max_tokens` bounds them."""
    max_tool_result_chars: int | None = Field(None, ge=1)
    """A tool result longer than this ends the episode (`oversized_tool_result`, the trace ending at the
    call); None: long results are truncated to `max_observation_chars` and the episode goes on."""


class AgentLimits(BaseModel):
    """The per-job limits an agent-loop handler's instance adds to its own (`max_turns`,
    `max_context_tokens`) and to `sampling_params.max_tokens` (per call); None keeps the behaviour
    without them."""

    max_generated_tokens: int | None = Field(None, ge=1)
    """Sampled tokens per trajectory, over all turns: the episode ends `generation_limit` when spent."""
    max_tool_result_chars: int | None = Field(None, ge=1)
    """A longer tool result ends the episode `oversized_tool_result` (else it is truncated and fed back)."""


class TurnBudget(Protocol):
    """An agent-loop handler's instance: its own turn and context limits plus AgentLimits."""

    max_turns: int
    max_context_tokens: int
    max_generated_tokens: int | None
    max_tool_result_chars: int | None


def agent_config(inst: TurnBudget, finish_tool: str | None = None) -> AgentConfig:
    """The loop's config from an instance's limits."""
    return AgentConfig(
        max_turns=inst.max_turns,
        max_context_tokens=inst.max_context_tokens,
        finish_tool=finish_tool,
        max_generated_tokens=inst.max_generated_tokens,
        max_tool_result_chars=inst.max_tool_result_chars,
    )


@dataclass
class Episode:
    conversation: TokenConversation
    finish_reason: str = "answer"
    outcome: Literal["completed", "timeout", "cancelled"] = "completed"
    final_text: str = ""
    turns: int = 0
    tool_calls: int = 0
    recoverable_errors: list[str] = field(default_factory=list)
    tool_call_parser: str | None = None
    tool_call_parser_from: str | None = None
    """Who named the parser: `job` (metadata), `backend`, `farm` (FARM_TOOL_CALL_PARSER) or `tokenizer`."""
    tool_call_misses: list[dict[str, Any]] = field(default_factory=list)
    """Turns whose text looked like a tool call that the parser could not read: {turn, errors}."""
    turn_parses: list[TurnParse] = field(default_factory=list)
    """Each assistant turn's parse outcome (farm/agent/parse_outcomes.py)."""

    @property
    def every_turn_missed(self) -> bool:
        """Every sampled turn held a call the parser could not read: the model never got a tool run,
        so its reward says nothing about the task (the parser likely does not match the model)."""
        return self.turns > 0 and len(self.tool_call_misses) == self.turns


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
        "tool_call_parser": episode.tool_call_parser,
        "tool_call_parser_from": episode.tool_call_parser_from,
        "tool_call_misses": episode.tool_call_misses,
        "tool_call_family": episode.conversation.tokenizer.family,
        "turn_parses": [t.record() for t in episode.turn_parses],
    }
    if episode.every_turn_missed:
        meta["flag"] = (
            f"every turn held a tool call the `{episode.tool_call_parser}` parser could not read: "
            "the reward does not measure the task"
        )
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
    except _OversizedToolResult as exc:
        episode.finish_reason = "oversized_tool_result"
        episode.recoverable_errors.append(str(exc))
    except JobCancelled:
        episode.finish_reason, episode.outcome = "cancelled", "cancelled"
    except JobDeadlineExceeded:
        episode.finish_reason, episode.outcome = "deadline", "timeout"
    if (
        episode.every_turn_missed
        and episode.outcome == "completed"
        and episode.finish_reason != "generation_limit"
    ):
        # (a turn cut by the trajectory's token budget is a miss the cut made: the budget is the reason)
        episode.finish_reason = "tool_call_misses"
    _count_parses(ctx, episode)
    return episode


def _count_parses(ctx: JobContext, episode: Episode) -> None:
    """Adds the episode's turns to the farm's counters: parse outcomes per family and parser (/metrics
    farm_tool_call_parse_outcomes) and missed turns (farm_tool_call_misses)."""
    pool = getattr(ctx.policy, "pool", None)
    if pool is None or not episode.turns:  # a test's canned policy has no pool: the trace still says it
        return
    counts = parse_counts(episode.conversation.tokenizer.family, episode.turn_parses)
    if episode.tool_call_misses:
        parser = episode.tool_call_parser or "unknown"
        counts[f"{keys.TOOL_CALL_MISSES}{parser}"] = len(episode.tool_call_misses)
        if episode.every_turn_missed:
            counts[f"{keys.TOOL_CALL_FLAGGED}{parser}"] = 1
    try:
        pool.count_stats(counts)
    except Exception:  # a counter must not fail the job whose trace already records the misses
        log.warning("could not count the tool-call parses of %s", ctx.job_id, exc_info=True)


class ToolCallParserRefused(RuntimeError):
    """The job requires a tool-call parser (an evaluation pinned to its training run's) and another one
    would run: the job fails naming both, rather than scoring a policy through the wrong parser."""


class _OversizedToolResult(Exception):
    """A tool result over the job's max_tool_result_chars: the episode ends at the call."""


def select_parser(ctx: JobContext) -> tuple[str, str]:
    """The tool-call parser for the job's next turn and who named it: the job, its current backend,
    the farm's setting, else the tokenizer's guess. A job's `required_tool_call_parser` refuses any other
    (ToolCallParserRefused)."""
    parser, named_by = _selected_parser(ctx)
    required = ctx.metadata.get("required_tool_call_parser")
    if isinstance(required, str) and required and resolve_parser(required) != parser:
        raise ToolCallParserRefused(
            f"the job requires the `{resolve_parser(required)}` tool-call parser "
            f"(required_tool_call_parser), but the `{parser}` parser would run (named by the {named_by}): "
            "refused"
        )
    return parser, named_by


def _selected_parser(ctx: JobContext) -> tuple[str, str]:
    named = ctx.metadata.get("tool_call_parser")
    if isinstance(named, str) and named:
        return resolve_parser(named), "job"
    if ctx.policy.tool_call_parser:
        return resolve_parser(ctx.policy.tool_call_parser), "backend"
    farm = get_settings().tool_call_parser
    if farm:
        return farm, "farm"
    return ctx.tokenizer.tool_parser, "tokenizer"


def _call_limit(turn: _Turn, episode: Episode) -> int | None:
    """The next call's max_tokens, or None when the context window or the trajectory's generated-token
    budget is spent (the finish reason set)."""
    config, conv = turn.config, episode.conversation
    room = config.max_context_tokens - len(conv)
    if room <= 0:
        episode.finish_reason = "context_window"
        return None
    budget = turn.per_call_max
    if config.max_generated_tokens is not None:
        budget = min(budget, config.max_generated_tokens - conv.sampled_tokens)
        if budget <= 0:
            episode.finish_reason = "generation_limit"
            return None
    return min(budget, room)


def _read_turn(ctx: JobContext, episode: Episode, text: str) -> tuple[str, ParsedAssistant]:
    """The parser for the turn and what it read from `text`, with the turn's parse outcome recorded."""
    parser, named_by = select_parser(ctx)
    episode.tool_call_parser, episode.tool_call_parser_from = parser, named_by
    tools = episode.conversation.tools
    parsed = ctx.tokenizer.parse_assistant(text, parser, tools)
    reparse = partial(ctx.tokenizer.parse_assistant, text, tools=tools)  # reparse(other parser)
    episode.turn_parses.append(classify(episode.turns, parser, text, parsed, reparse))
    return parser, parsed


def _take_turn(turn: _Turn, episode: Episode) -> bool:
    """Sample once and answer the tool calls; False when the episode has ended (its finish reason set)."""
    ctx, config, conv = turn.ctx, turn.config, episode.conversation
    ctx.check()
    limit = _call_limit(turn, episode)
    if limit is None:
        return False
    params = {
        **turn.sampling,
        "max_tokens": limit,
        "seed": call_seed(ctx.job_id, ctx.spec.sampling_params.seed, episode.turns),
    }
    try:
        generation = ctx.policy.generate(conv.context_ids, params)
    except ContextOverflow:
        episode.finish_reason = "context_window"
        return False
    episode.turns += 1
    parser, parsed = _read_turn(ctx, episode, ctx.tokenizer.decode(generation.token_ids))
    if parsed.errors:
        episode.tool_call_misses.append({"turn": episode.turns, "errors": parsed.errors})
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
        hint = FORMATS[parser].hint
        replies.append(
            {
                "role": "user",
                "content": f"Your tool call could not be parsed ({error}). Write each call as {hint}",
            }
        )
    left = config.max_turns - episode.turns
    if left <= 0:
        episode.finish_reason = "max_turns"
        return False
    if config.max_generated_tokens is not None and conv.sampled_tokens >= config.max_generated_tokens:
        episode.finish_reason = "generation_limit"
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
        _check_size(turn.config, call.name, observation)
        key = json.dumps([call.name, call.arguments], sort_keys=True)
        if turn.config.repeated_action_hint and key in turn.seen_calls:
            observation += "\n[note: you already made this exact call; try something different]"
        turn.seen_calls.add(key)
        content = _truncate(observation, turn.config.max_observation_chars)
        replies.append({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content})
    return replies


def _check_size(config: AgentConfig, name: str, observation: str) -> None:
    limit = config.max_tool_result_chars
    if limit is not None and len(observation) > limit:
        raise _OversizedToolResult(
            f"{name}: a result of {len(observation)} characters, over max_tool_result_chars={limit}"
        )


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
