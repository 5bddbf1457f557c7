"""Real farm trajectories for the trainer conformance tests, built in-process with the farm's own parts.

The shipped tokenizer renders a multi-turn tool episode through `TokenConversation` (the agent loop's
token state): each turn the policy asks for several tools, the farm appends every tool result (and a
user nudge) masked, and the job's result comes from `AgentHandler.final_result`, which copies the
request metadata (group_id) onto every trace. Two prompts (GRPO groups) x three samples; one sample's
last turn is cut by max_tokens, and a second job of each group leaves two traces (per-turn export).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from farm.agent.conversation import TokenConversation
from farm.chat.tokenizer import ChatTokenizer
from farm.handler.context import JobContext
from farm.handler.protocol import AgentHandler, EvalOutput, HandlerInstance, RunOutput
from farm.handler.standalone import job_context
from farm.inference.generation import Generation
from farm.jobs.spec import JobSpec
from farm.models import JobResult

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} tool",
            "parameters": {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]},
        },
    }
    for name in ("calc", "search")
]


def tokenizer() -> ChatTokenizer:
    return ChatTokenizer.load()


def _call(i: int, name: str, x: str) -> dict[str, Any]:
    return {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": json.dumps({"x": x})}}


def _sample(conv: TokenConversation, message: dict[str, Any], *, cut: bool = False) -> None:
    ids = conv.tokenizer.encode(conv.tokenizer.assistant_text(message))
    if cut:
        ids = ids[: max(1, len(ids) // 2)]  # max_tokens hit mid-turn: no end-of-turn token
    logprobs = [-0.01 * (k + 1) for k in range(len(ids))]
    conv.add_sampled(
        Generation(token_ids=ids, logprobs=logprobs, finish_reason="length" if cut else "stop"), message
    )


def episode(question: str, *, cut: bool = False) -> tuple[TokenConversation, str]:
    """Two tool turns (two calls each, every result appended, plus a user nudge), then the answer."""
    conv = TokenConversation(
        tokenizer(),
        [{"role": "system", "content": "Use the tools."}, {"role": "user", "content": question}],
        TOOLS,
    )
    for turn in range(2):
        calls = [_call(2 * turn, "calc", f"{turn}+1"), _call(2 * turn + 1, "search", f"q{turn}")]
        _sample(conv, {"role": "assistant", "content": f"step {turn}", "tool_calls": calls})
        conv.add_messages(
            [
                {"role": "tool", "tool_call_id": calls[0]["id"], "content": f"calc says {turn + 1}"},
                {"role": "tool", "tool_call_id": calls[1]["id"], "content": f"search found q{turn}"},
                {"role": "user", "content": f"turn {turn} done, continue"},
            ]
        )
    _sample(conv, {"role": "assistant", "content": "The answer is 42."}, cut=cut)
    return conv, "length" if cut else "answer"


def context(job_id: str, metadata: dict[str, Any], task_id: str | None) -> JobContext:
    spec = JobSpec(
        job_id=job_id, handler="tool_agent", instance={}, timeout_s=60, metadata=metadata, task_id=task_id
    )
    instance = HandlerInstance(handler="tool_agent")
    return job_context(spec, instance, stage="eval", node="test", workdir=Path("."), tokenizer=tokenizer)


def job(job_id: str, group: str, reward: float, *, cut: bool = False, per_turn: bool = False) -> JobResult:
    conv, finish = episode(f"question of {group}", cut=cut)
    trace_meta = {"job_id": job_id, "handler": "tool_agent", "builder": "agent_loop", "answer": "42"}
    traces = [conv.to_trace(finish, trace_meta)]
    if per_turn:  # a second trace of the same job, e.g. the first turn alone
        first = conv.to_trace("answer", trace_meta)
        end = first.loss_mask.index(0)
        traces.insert(
            0,
            first.model_copy(
                update={
                    "response_ids": first.response_ids[:end],
                    "loss_mask": first.loss_mask[:end],
                    "response_logprobs": first.response_logprobs[:end],
                    "response_messages": first.response_messages[:1],
                }
            ),
        )
    ctx = context(job_id, {"group_id": group, "policy_version": 3}, task_id=None)
    run = RunOutput(traces=traces, finish_reason=finish)
    handler = SimpleNamespace(name="tool_agent")
    return AgentHandler.final_result(handler, ctx, run, EvalOutput(reward=reward))  # type: ignore[arg-type]


def results() -> list[JobResult]:
    """Jobs of two groups, interleaved as they finish (not grouped)."""
    out = []
    for s in range(3):
        for g in ("g-a", "g-b"):
            out.append(
                job(f"{g}-{s}", g, reward=float(s == 0), cut=(g == "g-b" and s == 2), per_turn=(s == 1))
            )
    return out


def traces() -> list[Any]:
    """The bare traces of those jobs: flatten must still group them by metadata.group_id."""
    return [t for r in results() for t in r.trajectory.traces]
