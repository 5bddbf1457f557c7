"""`prefix_merging` (POLAR §3.4.2): stitch append-only completion chains into one token-faithful trace.

Completions are grouped into chains: a completion joins the chain whose last prompt is a strict token
prefix of its own prompt (longest wins), provided its message list grew, so compactions, prompt rewrites
and interleaved sub-agents form chains of their own. Inside a chain the trace is
    p_1 || a_1 || u_1 || a_2 || u_2 || ... || a_K
where a_m are the raw sampled tokens (mask 1, real logprobs) and u_m the canonical interstitial taken from
the next prompt after the server's re-rendering of a_m (mask 0, logprob 0.0). Unlike the reference
implementation, a link that cannot be stitched (no end-of-turn token in the tail) starts a new trace
rather than dropping the rest of the chain, and a re-rendered assistant turn that differs from the
sampled tokens (retokenization drift) is reported in the trace metadata. A re-rendering whose message is
the sampled one up to serialization (tool-call arguments re-dumped with other key order or spacing,
content sent back as a list of text parts) is not drift: the sampled tokens stand and the link is
listed under `reserialized`. What decides is what was rendered: the re-rendered tokens and the sampled
ones are both read by the model's tool-call parser (the farm's tokenizer and parser, or those the export
names: `tokenizer`, `tool_call_parser`), and only the same content with the same calls (names and
arguments) is re-serialization; a changed name, argument or text is drift even where the chat messages
the harness sent back look the same. Without a tokenizer to read them, the messages are compared.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, Literal

from farm.agent.parse_outcomes import classify_reply
from farm.builders.records import CompletionRecord, turn_versions
from farm.models import Trace

END_OF_TURN_FINISHES = frozenset({"stop", "tool_calls", "stop_sequence"})
DriftPolicy = Literal["flag", "split"]
Reader = Callable[[list[int]], tuple[Any, ...]]
"""Sampled or rendered ids of one assistant turn -> what they mean (content and calls)."""


def rendered_reader(tokenizer: str | None = None, tool_call_parser: str | None = None) -> Reader | None:
    """Reads ids as the model's assistant turn: the tokenizer (a FARM_TOKENIZER value; default the
    farm's) decodes them, the tool-call parser (default the one guessed for the tokenizer) reads the text.
    None when the tokenizer cannot be loaded."""
    from farm.chat.tokenizer import ChatTokenizer  # transformers loads only when an export needs it
    from farm.settings import get_settings

    try:
        chat = ChatTokenizer.load(tokenizer or get_settings().tokenizer)
    except (OSError, ValueError):
        return None

    def read(ids: list[int]) -> tuple[Any, ...]:
        parsed = chat.parse_assistant(chat.decode(ids), tool_call_parser)
        calls = tuple((c.name, json.dumps(c.arguments, sort_keys=True)) for c in parsed.tool_calls)
        return (parsed.content, calls, tuple(parsed.errors))

    return read


def detect_end_of_turn(records: Sequence[CompletionRecord]) -> int | None:
    """The most common last sampled token among completions that ended their turn normally."""
    last_tokens = Counter(
        r.response_ids[-1] for r in records if r.response_ids and r.finish_reason in END_OF_TURN_FINISHES
    )
    return last_tokens.most_common(1)[0][0] if last_tokens else None


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def canonical_turn(message: dict[str, Any]) -> tuple[Any, ...]:
    """An assistant message reduced to what survives re-serialization: text and (name, parsed args)."""
    calls = tuple(
        (
            c.get("function", {}).get("name"),
            json.dumps(_arguments(c.get("function", {}).get("arguments")), sort_keys=True),
        )
        for c in message.get("tool_calls") or []
        if isinstance(c, dict)
    )
    return (message.get("role"), _text(message.get("content")).strip(), calls)


def _same_turn_reserialized(prev: CompletionRecord, nxt: CompletionRecord) -> bool:
    """True when the next prompt echoes prev's sampled message, differing only in serialization."""
    echoed_at = len(prev.request_messages)
    if not prev.response_message or len(nxt.request_messages) <= echoed_at:
        return False
    return canonical_turn(prev.response_message) == canonical_turn(nxt.request_messages[echoed_at])


def _same_meaning(
    prev: CompletionRecord,
    nxt: CompletionRecord,
    rendered: list[int],
    sampled: list[int],
    reader: Reader | None,
) -> bool | None:
    """Whether a re-rendered turn says what was sampled: the chat messages the harness sent back, and
    (with a reader) the rendered tokens, what the model reads next, must both say the same. None: the
    messages agree but a reader was asked for and could not read the tokens (the trace says so)."""
    if not _same_turn_reserialized(prev, nxt):
        return False
    if reader is None:
        return True
    try:
        return reader(rendered) == reader(sampled)
    except _Unreadable:
        return None


class _Unreadable(Exception):
    """No tokenizer to read the tokens with, or ids it does not know."""


def _lazy(tokenizer: str | None, tool_call_parser: str | None) -> Reader:
    """The reader, loaded at the first turn that needs it (most chains re-render every turn exactly)."""
    loaded: list[Reader | None] = []

    def read(ids: list[int]) -> tuple[Any, ...]:
        if not loaded:
            loaded.append(rendered_reader(tokenizer, tool_call_parser))
        reader = loaded[0]
        if reader is None:
            raise _Unreadable
        try:
            return reader(ids)
        except (ValueError, IndexError, OverflowError, TypeError) as exc:
            raise _Unreadable from exc

    return read


def group_chains(
    records: Sequence[CompletionRecord], require_message_growth: bool = True
) -> list[list[CompletionRecord]]:
    """Partition completions (in insertion order) into append-only chains by strict token prefix."""
    chains: list[list[CompletionRecord]] = []
    for record in records:
        best: list[CompletionRecord] | None = None
        for chain in chains:
            last = chain[-1]
            n = len(last.prompt_ids)
            if len(record.prompt_ids) <= n or record.prompt_ids[:n] != last.prompt_ids:
                continue
            if require_message_growth and len(record.request_messages) <= len(last.request_messages):
                continue
            if best is None or n >= len(best[-1].prompt_ids):
                best = chain
        if best is None:
            chains.append([record])
        else:
            best.append(record)
    return chains


@dataclass
class _TraceBuilder:
    """Accumulates one merged trace."""

    first: CompletionRecord
    split_reason: str | None = None
    response_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    response_messages: list[dict[str, Any]] = field(default_factory=list)
    records: list[CompletionRecord] = field(default_factory=list)
    segments: list[dict[str, Any]] = field(default_factory=list)
    drift: list[dict[str, Any]] = field(default_factory=list)
    reserialized: list[str] = field(default_factory=list)
    rendered_unchecked: list[str] = field(default_factory=list)
    """Re-serialized turns whose rendered tokens could not be read (no tokenizer, unknown ids): judged by
    the chat messages alone."""
    logprobs_available: bool = True

    def __post_init__(self) -> None:
        self.add_sampled(self.first)

    def add_sampled(self, record: CompletionRecord) -> None:
        n = len(record.response_ids)
        lps = record.response_logprobs
        if lps is None or len(lps) != n:
            self.logprobs_available = False
            lps = [0.0] * n
        start = len(self.response_ids)
        self.segments.append({"completion_id": record.completion_id, "start": start, "length": n})
        self.response_ids.extend(record.response_ids)
        self.loss_mask.extend([1] * n)
        self.logprobs.extend(lps)
        if record.response_message:
            self.response_messages.append(record.response_message)
        self.records.append(record)

    def add_interstitial(self, tokens: list[int], messages: list[dict[str, Any]]) -> None:
        self.response_ids.extend(tokens)
        self.loss_mask.extend([0] * len(tokens))
        self.logprobs.extend([0.0] * len(tokens))
        self.response_messages.extend(messages)

    def finish(self, chain_index: int, metadata: dict[str, Any]) -> Trace:
        last = self.records[-1]
        backends = list(dict.fromkeys(r.backend for r in self.records if r.backend))
        return Trace(
            prompt_ids=list(self.first.prompt_ids),
            response_ids=self.response_ids,
            loss_mask=self.loss_mask,
            response_logprobs=self.logprobs,
            prompt_messages=self.first.request_messages,
            response_messages=self.response_messages,
            tools=self.first.tools,
            finish_reason=last.finish_reason,
            reward=last.reward,
            metadata={
                **metadata,
                "builder": "prefix_merging",
                "session_id": self.first.session_id,
                "chain": chain_index,
                "completion_ids": [r.completion_id for r in self.records],
                "backend": backends[0] if len(backends) == 1 else backends,
                "segments": self.segments,
                "split_reason": self.split_reason,
                "retokenization_drift": bool(self.drift),
                "drift": self.drift,
                "reserialized": self.reserialized,
                "reserialized_unchecked": self.rendered_unchecked,
                "logprobs_available": self.logprobs_available,
                "turn_parses": [
                    classify_reply(i, r.response_message, r.tools).record()
                    for i, r in enumerate(self.records, start=1)
                ],
                **turn_versions(self.records),
            },
        )


def _merge_chain(
    chain: list[CompletionRecord], eot: int | None, on_drift: DriftPolicy, reader: Reader | None = None
) -> list[_TraceBuilder]:
    current = _TraceBuilder(chain[0])
    out = [current]
    for prev, nxt in pairwise(chain):
        tail = nxt.prompt_ids[len(prev.prompt_ids) :]
        cut = tail.index(eot) if eot is not None and eot in tail else None
        if cut is None:
            reason = "no_end_of_turn" if eot is not None else "end_of_turn_unknown"
            current = _TraceBuilder(nxt, split_reason=reason)
            out.append(current)
            continue
        ends_with_eot = bool(prev.response_ids) and prev.response_ids[-1] == eot
        sampled_body = prev.response_ids[:-1] if ends_with_eot else prev.response_ids
        rendered = tail[:cut]
        same = rendered != sampled_body and _same_meaning(prev, nxt, rendered, sampled_body, reader)
        if same is not False:
            current.reserialized.append(prev.completion_id)
            if same is None:
                current.rendered_unchecked.append(prev.completion_id)
        elif rendered != sampled_body:
            mismatch = next(
                (i for i, (a, b) in enumerate(zip(rendered, sampled_body, strict=False)) if a != b),
                min(len(rendered), len(sampled_body)),
            )
            if on_drift == "split":
                current = _TraceBuilder(nxt, split_reason="retokenization_drift")
                out.append(current)
                continue
            current.drift.append(
                {
                    "completion_id": prev.completion_id,
                    "sampled_len": len(sampled_body),
                    "rendered_len": len(rendered),
                    "first_mismatch": mismatch,
                }
            )
        interstitial = tail[cut + 1 :] if ends_with_eot else tail[cut:]
        new_messages = nxt.request_messages[len(prev.request_messages) + 1 :]
        current.add_interstitial(interstitial, new_messages)
        current.add_sampled(nxt)
    return out


def build_prefix_merging(
    records: Sequence[CompletionRecord],
    metadata: dict[str, Any] | None = None,
    eot_token_id: int | None = None,
    on_drift: DriftPolicy = "flag",
    require_message_growth: bool = True,
    compare_rendered: bool = True,
    tokenizer: str | None = None,
    tool_call_parser: str | None = None,
) -> list[Trace]:
    """`compare_rendered`: tell re-serialization from drift by reading the rendered tokens with
    `tokenizer` (a FARM_TOKENIZER value, default the farm's) and `tool_call_parser` (default its guess)."""
    usable = [r for r in records if r.has_tokens]
    eot = eot_token_id if eot_token_id is not None else detect_end_of_turn(usable)
    reader = _lazy(tokenizer, tool_call_parser) if compare_rendered else None
    traces: list[Trace] = []
    for chain_index, chain in enumerate(group_chains(usable, require_message_growth)):
        for builder in _merge_chain(chain, eot, on_drift, reader):
            traces.append(builder.finish(chain_index, {**(metadata or {}), "end_of_turn_token": eot}))
    return traces
