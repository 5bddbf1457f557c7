"""What the real-server tests measure on each trace: the token invariant against what the server answered
(through the recording proxy), and the farm's context of every turn against the server's own `/tokenize` of
the same messages."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx

from farm.adapters.version_mask import turn_runs
from farm.models.results import Trace


@dataclass
class Tally:
    turns: int = 0
    violations: list[str] = field(default_factory=list)
    """A loss-mask-1 run whose tokens or logprobs are not exactly what the server sampled for that context."""
    mismatches: list[str] = field(default_factory=list)
    """A turn whose context is not the server's own rendering of the messages before it."""


def check_tokens(
    trace: Trace,
    sampled: dict[tuple[int, ...], tuple[list[int], list[float], str | None]],
    tally: Tally,
    job: str,
) -> None:
    """Each run of loss-mask-1 tokens is one call: its context (prompt + response before it) must be a prompt
    the server answered, with exactly these tokens and logprobs."""
    for k, (start, end) in enumerate(turn_runs(trace.loss_mask)):
        tally.turns += 1
        context = tuple(trace.prompt_ids + trace.response_ids[:start])
        answer = sampled.get(context)
        if answer is None:
            tally.violations.append(f"{job} turn {k}: no call to the server had this context")
            continue
        tokens, logprobs, _ = answer
        if trace.response_ids[start:end] != tokens[: end - start] or len(tokens) < end - start:
            tally.violations.append(f"{job} turn {k}: tokens differ from the server's")
        elif trace.response_logprobs[start:end] != logprobs[: end - start]:
            tally.violations.append(f"{job} turn {k}: logprobs differ from the server's")


def turn_messages(trace: Trace) -> list[list[dict[str, Any]]]:
    """The messages before each assistant turn: the k-th assistant message of the response is turn k."""
    out: list[list[dict[str, Any]]] = []
    history = list(trace.prompt_messages)
    for message in trace.response_messages:
        if message.get("role") == "assistant":
            out.append(list(history))
        history.append(message)
    return out


def check_context(root: str, model: str, trace: Trace, tally: Tally, job: str, http: httpx.Client) -> None:
    runs = turn_runs(trace.loss_mask)
    for k, messages in enumerate(turn_messages(trace)[: len(runs)]):
        start = runs[k][0]
        context = trace.prompt_ids + trace.response_ids[:start]
        body: dict[str, Any] = {"model": model, "messages": messages, "add_generation_prompt": True}
        if trace.tools:
            body["tools"] = trace.tools
        answer = http.post(f"{root}/tokenize", json=body)
        if answer.status_code != 200:
            tally.mismatches.append(f"{job} turn {k}: the server refused the messages: {answer.text[:200]}")
            continue
        theirs = answer.json()["tokens"]
        if theirs != context:
            at = next((i for i, (a, b) in enumerate(zip(theirs, context, strict=False)) if a != b), None)
            tally.mismatches.append(
                f"{job} turn {k}: farm {len(context)} tokens, server {len(theirs)} (first difference at {at})"
            )
