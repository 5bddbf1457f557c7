"""The agent loop's per-job limits and per-turn parse outcomes, over a canned policy (pure logic; the same
through a real farm: tests/integration/test_termination_farm.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from farm.agent.loop import (
    AgentConfig,
    ToolCallParserRefused,
    episode_trace,
    run_agent,
)
from farm.agent.parse_outcomes import ParseOutcome, ParseTally, classify, classify_reply, counts
from farm.agent.tools import FunctionTool
from farm.agent.versions import TurnVersions
from farm.api.parse_metrics import parse_outcome_families
from farm.chat.tokenizer import ChatTokenizer
from farm.handler.context import JobContext
from farm.handler.standalone import job_context
from farm.inference.generation import Generation
from farm.jobs.spec import JobSpec

HERMES_CALL = '<tool_call>\n{"name": "python", "arguments": {"code": "print(6 * 7)"}}\n</tool_call>'
LLAMA_CALL = '{"name": "python", "parameters": {"code": "print(6 * 7)"}}'
BROKEN_CALL = '<tool_call>\n{"name": "python", "arguments": {"code": </tool_call>'


class Scripted:
    """Answers each call with the next text, cut at the call's max_tokens as a backend cuts it."""

    def __init__(self, tokenizer: ChatTokenizer, texts: list[str]) -> None:
        self.tokenizer, self.texts = tokenizer, list(texts)
        self.tool_call_parser: str | None = None
        self.backends_used = ["http://canned"]
        self.versions = TurnVersions()
        self.max_tokens: list[int] = []

    def generate(self, prompt_ids: list[int], sampling: dict[str, Any]) -> Generation:
        self.max_tokens.append(sampling["max_tokens"])
        ids = [*self.tokenizer.encode(self.texts.pop(0)), self.tokenizer.eos_token_id]
        cut = len(ids) > sampling["max_tokens"]
        ids = ids[: sampling["max_tokens"]]
        return Generation(token_ids=ids, logprobs=[0.0] * len(ids), finish_reason="length" if cut else "stop")


def context(texts: list[str], metadata: dict[str, Any] | None = None, max_tokens: int = 256) -> JobContext:
    tokenizer = ChatTokenizer.load()
    spec = JobSpec(
        job_id="j1",
        handler="math",
        instance={},
        timeout_s=60,
        metadata=metadata or {},
        sampling_params={"max_tokens": max_tokens},
    )
    policy = Scripted(tokenizer, texts)
    return job_context(spec, spec, workdir=Path("/tmp"), policy=policy, tokenizer=lambda: tokenizer)


def python_tool(output: str = "42") -> FunctionTool:
    return FunctionTool("python", "run code", {"type": "object", "required": ["code"]}, lambda a: output)


MESSAGES = [{"role": "user", "content": "What is 6 * 7?"}]


def test_a_tool_result_over_the_limit_ends_the_episode_at_the_call() -> None:
    ctx = context([HERMES_CALL, "The answer is 42."])
    config = AgentConfig(max_turns=4, max_tool_result_chars=100)
    episode = run_agent(ctx, MESSAGES, [python_tool("x" * 500)], config)
    assert episode.finish_reason == "oversized_tool_result" and episode.turns == 1
    trace = episode_trace(ctx, "math", episode)
    assert trace.response_messages[-1]["role"] == "assistant"  # kept up to the offending turn
    assert trace.loss_mask[-1] == 1
    assert "max_tool_result_chars=100" in episode.recoverable_errors[-1]
    # without the limit the result is truncated and the episode goes on, as before
    again = run_agent(context([HERMES_CALL, "The answer is 42."]), MESSAGES, [python_tool("x" * 500)],
                      AgentConfig(max_turns=4))  # fmt: skip
    assert (again.finish_reason, again.turns) == ("answer", 2)


def test_the_trajectorys_generated_token_budget_bounds_each_call_and_ends_it() -> None:
    tokenizer = ChatTokenizer.load()
    first = len(tokenizer.encode(HERMES_CALL)) + 1  # with its end-of-turn token
    ctx = context([HERMES_CALL, "The answer is 42, as computed by the tool just now."])
    budget = first + 5
    episode = run_agent(ctx, MESSAGES, [python_tool()], AgentConfig(max_turns=4, max_generated_tokens=budget))
    assert ctx.policy.max_tokens == [budget, 5]  # type: ignore[attr-defined]
    assert episode.finish_reason == "length" and sum(episode.conversation.loss_mask) == budget
    # spent exactly by a tool-calling turn: the episode ends there rather than sampling 0 tokens
    ctx = context([HERMES_CALL, "The answer is 42."])
    episode = run_agent(ctx, MESSAGES, [python_tool()], AgentConfig(max_turns=4, max_generated_tokens=first))
    assert (episode.finish_reason, episode.turns, episode.tool_calls) == ("generation_limit", 1, 1)
    # a call cut by the budget is a miss the cut made: the budget stays the reason
    ctx = context([HERMES_CALL, "The answer is 42."])
    episode = run_agent(ctx, MESSAGES, [python_tool()], AgentConfig(max_turns=4, max_generated_tokens=6))
    assert episode.finish_reason == "generation_limit" and episode.turn_parses[0].outcome == "malformed"


def test_a_turn_cut_at_max_tokens_ends_generation_limited() -> None:
    ctx = context(["The answer is forty-two, and here is a long explanation of why."], max_tokens=5)
    episode = run_agent(ctx, MESSAGES, [python_tool()], AgentConfig(max_turns=4))
    assert episode.finish_reason == "length"  # termination reason generation_limit


def test_a_conversation_over_the_context_window_ends_context_limited() -> None:
    long = [{"role": "user", "content": "What is 6 * 7? " * 200}]
    episode = run_agent(context(["42"]), long, [python_tool()], AgentConfig(max_context_tokens=64))
    assert (episode.finish_reason, episode.turns) == ("context_window", 0)


def test_each_turn_records_its_parse_outcome() -> None:
    ctx = context([HERMES_CALL, LLAMA_CALL, BROKEN_CALL, "The answer is 42."])
    episode = run_agent(ctx, MESSAGES, [python_tool()], AgentConfig(max_turns=6))
    meta = episode_trace(ctx, "math", episode).metadata
    outcomes = [(t["turn"], t["parser"], t["outcome"]) for t in meta["turn_parses"]]
    assert outcomes == [
        (1, "hermes", "calls"),
        (2, "hermes", "unparsed"),
        (3, "hermes", "malformed"),
        (4, "hermes", "no_call"),
    ]
    assert meta["turn_parses"][1]["would_parse"] == ["llama3_json"]
    assert meta["tool_call_family"] == "hermes"
    tally = ParseTally.from_traces([meta])
    assert tally.unparsed_rate("hermes", "hermes") == pytest.approx(2 / 3)
    stats = {k: float(v) for k, v in counts("hermes", episode.turn_parses).items()}
    text = "".join(str(m) for fam in parse_outcome_families(stats) for m in fam.samples)
    assert "'outcome': 'unparsed'" in text and "farm_tool_call_unparsed_rate" in text


def test_a_required_parser_refuses_another_naming_both() -> None:
    ctx = context([HERMES_CALL], {"required_tool_call_parser": "llama3_json"})
    with pytest.raises(ToolCallParserRefused, match=r"`llama3_json`.*`hermes`"):
        run_agent(ctx, MESSAGES, [python_tool()], AgentConfig(max_turns=2))
    ok = context(
        [LLAMA_CALL, "42"], {"required_tool_call_parser": "llama3_json", "tool_call_parser": "llama3"}
    )
    assert run_agent(ok, MESSAGES, [python_tool()], AgentConfig(max_turns=2)).tool_calls == 1


def test_classify_only_counts_a_foreign_parser_that_reads_more_calls() -> None:
    tokenizer = ChatTokenizer.load()

    def read(parser: str, text: str) -> Any:
        return tokenizer.parse_assistant(text, parser)

    # a hermes call holds llama-style JSON: llama3_json reads no more calls than hermes did
    turn = classify(1, "hermes", HERMES_CALL, read("hermes", HERMES_CALL), lambda o: read(o, HERMES_CALL))
    assert turn.outcome is ParseOutcome.calls and turn.would_parse == []
    plain = classify(1, "hermes", "42", read("hermes", "42"), lambda o: read(o, "42"))
    assert plain.outcome is ParseOutcome.no_call


def test_a_gateway_reply_with_a_call_left_in_its_text_is_unparsed() -> None:
    left = classify_reply(1, {"role": "assistant", "content": LLAMA_CALL})
    assert (left.parser, left.outcome, left.would_parse) == (
        "backend",
        ParseOutcome.unparsed,
        ["llama3_json"],
    )
    read = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "f"}}],
    }
    assert classify_reply(1, read).outcome is ParseOutcome.calls
    assert (
        classify_reply(2, {"role": "assistant", "content": "The answer is 42."}).outcome
        is ParseOutcome.no_call
    )
