"""What the real-server tests measure on each trace: the token invariant against what the server answered
(through the recording proxy), and the farm's context of every turn against the server's own `/tokenize` of
the same messages."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx

from farm.adapters.version_mask import turn_runs
from farm.models.results import Trace

END_IDS = frozenset({1, 106})
"""Gemma 3's generation-config end ids (<eos>, <end_of_turn>): where vLLM stops, kept in the turn's ids."""


@dataclass
class Tally:
    turns: int = 0
    contexts: int = 0
    """Turn contexts compared with the server's /tokenize."""
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


def check_context(root: str, model: str, trace: Trace, tally: Tally, job: str, http: httpx.Client) -> None:
    """Turn k's context must be the server's own rendering of the messages before it, the earlier assistant
    turns being what the model sampled in them (their text, as the server decodes it). Inside those turns the
    farm keeps the sampled ids, which the server may tokenize otherwise (a constrained or unusual split):
    the expected context takes them as sampled, and only the server's rendering of the rest must match."""
    runs = turn_runs(trace.loss_mask)
    history = _history(trace)
    for k, (start, _) in enumerate(runs):
        tally.contexts += 1
        before = runs[:k]
        messages = list(trace.prompt_messages)
        for kind, item in history[k]:
            if kind == "sampled":  # the model's own turn k', as text the template renders
                s, e = runs[item]
                messages.append(
                    {"role": "assistant", "content": _detokenize(root, model, _body(trace, s, e), http)}
                )
            else:
                messages.append(item)
        body: dict[str, Any] = {"model": model, "messages": messages, "add_generation_prompt": True}
        if trace.tools:
            body["tools"] = trace.tools
        answer = http.post(f"{root}/tokenize", json=body)
        if answer.status_code != 200:
            tally.mismatches.append(f"{job} turn {k}: the server refused the messages: {answer.text[:200]}")
            continue
        theirs = _as_sampled(root, model, trace, before, answer.json()["tokens"], http)
        context = trace.prompt_ids + trace.response_ids[:start]
        if theirs != context:
            at = next((i for i, (a, b) in enumerate(zip(theirs, context, strict=False)) if a != b), None)
            tally.mismatches.append(
                f"{job} turn {k}: farm {len(context)} tokens, server {len(theirs)} (first difference at {at})"
            )


def _history(trace: Trace) -> list[list[tuple[str, Any]]]:
    """For each turn k, the response messages before it: ("sampled", k') for the model's turn k',
    ("message", m) for what the farm appended (tool results, feedback), as it recorded them."""
    out: list[list[tuple[str, Any]]] = []
    history: list[tuple[str, Any]] = []
    turn = 0
    for message in trace.response_messages:
        if message.get("role") == "assistant":
            out.append(list(history))
            history.append(("sampled", turn))
            turn += 1
        else:
            history.append(("message", message))
    return out


def _body(trace: Trace, start: int, end: int) -> list[int]:
    """A sampled turn's ids without the end-of-turn id the server stopped on (the template writes it)."""
    ids = trace.response_ids[start:end]
    return ids[:-1] if ids and ids[-1] in END_IDS else ids


def _detokenize(root: str, model: str, ids: list[int], http: httpx.Client) -> str:
    answer = http.post(f"{root}/detokenize", json={"model": model, "tokens": ids})
    answer.raise_for_status()
    return str(answer.json()["prompt"])


def _as_sampled(
    root: str, model: str, trace: Trace, runs: list[tuple[int, int]], theirs: list[int], http: httpx.Client
) -> list[int]:
    """The server's tokens with each earlier sampled turn's text (its tokenization by the server) replaced
    by the ids the model sampled; unchanged where that text is not found where the farm has the turn."""
    out = list(theirs)
    for start, end in runs:
        sampled = _body(trace, start, end)
        text = _detokenize(root, model, sampled, http)
        plain = {"model": model, "prompt": text, "add_special_tokens": False}
        retokenized = http.post(f"{root}/tokenize", json=plain).json()["tokens"]
        at = len(trace.prompt_ids) + start  # the earlier turns replaced: indexed as the farm's context
        if out[at : at + len(retokenized)] != retokenized:
            return theirs  # the server's rendering does not hold the turn's text there: compared as it is
        out[at : at + len(retokenized)] = sampled
    return out
