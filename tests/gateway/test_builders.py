"""Unit and property tests of the trajectory builders (pure logic, no processes)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from farm.builders import (
    CompletionRecord,
    build_traces,
    builder_names,
    detect_end_of_turn,
    discount_rewards,
)
from farm.builders.prefix_merging import canonical_turn

EOT = 2
NEWLINE, TURN_START, ASSISTANT = 3, 4, 5
BODY = st.integers(min_value=10, max_value=99)


@dataclass
class _Agent:
    system_token: int
    epoch: int = 0
    prompt: list[int] = field(default_factory=list)
    messages: int = 2


@dataclass
class _Session:
    """A synthetic harness session over a ChatML-like integer 'template'."""

    records: list[CompletionRecord] = field(default_factory=list)
    owner: dict[str, tuple[int, int]] = field(default_factory=dict)
    drifted: set[str] = field(default_factory=set)


def _fresh_prompt(system_token: int, user: list[int]) -> list[int]:
    return [TURN_START, system_token, EOT, NEWLINE, TURN_START, *user, EOT, NEWLINE, TURN_START, ASSISTANT]


@st.composite
def sessions(draw: st.DrawFn) -> _Session:
    agents = [_Agent(1000)]
    agents[0].prompt = _fresh_prompt(1000, draw(st.lists(BODY, min_size=1, max_size=5)))
    session = _Session()
    steps = draw(
        st.lists(st.sampled_from(["turn", "turn", "turn", "compact", "spawn"]), min_size=1, max_size=25)
    )
    for step in steps:
        if step == "spawn":
            agent = _Agent(1000 + len(agents))
            agent.prompt = _fresh_prompt(agent.system_token, draw(st.lists(BODY, min_size=1, max_size=5)))
            agents.append(agent)
            continue
        agent = agents[draw(st.integers(0, len(agents) - 1))]
        if step == "compact":
            agent.epoch += 1
            agent.prompt = _fresh_prompt(agent.system_token, draw(st.lists(BODY, min_size=1, max_size=6)))
            agent.messages = 2
            continue
        body = draw(st.lists(BODY, min_size=0, max_size=8))
        stopped = draw(st.booleans()) or not body
        sampled = [*body, EOT] if stopped else body
        logprobs = draw(st.lists(st.floats(-20.0, 0.0), min_size=len(sampled), max_size=len(sampled)))
        cid = f"c{len(session.records)}"
        session.records.append(
            CompletionRecord(
                completion_id=cid,
                session_id="s",
                index=len(session.records),
                request_messages=[{"role": "user", "content": str(i)} for i in range(agent.messages)],
                prompt_ids=list(agent.prompt),
                response_ids=sampled,
                response_logprobs=logprobs,
                finish_reason="stop" if stopped else "length",
                response_message={"role": "assistant", "content": cid},
            )
        )
        session.owner[cid] = (agent.system_token, agent.epoch)
        rendered = list(body)
        if body and draw(st.integers(0, 9)) == 0:  # the template re-renders this turn differently
            rendered[draw(st.integers(0, len(body) - 1))] = 100
            session.drifted.add(cid)
        user = draw(st.lists(BODY, min_size=1, max_size=6))
        agent.prompt = [
            *agent.prompt,
            *rendered,
            EOT,
            NEWLINE,
            TURN_START,
            *user,
            EOT,
            NEWLINE,
            TURN_START,
            ASSISTANT,
        ]
        agent.messages += 2
    return session


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions())
def test_prefix_merging_is_token_faithful(session: _Session) -> None:
    records = {r.completion_id: r for r in session.records}
    traces = build_traces("prefix_merging", session.records, eot_token_id=EOT)
    seen: Counter[str] = Counter()
    for trace in traces:
        ids, mask, lps = trace.response_ids, trace.loss_mask, trace.response_logprobs
        assert len(ids) == len(mask) == len(lps)
        trainable = [0] * len(ids)
        owners = {session.owner[c] for c in trace.metadata["completion_ids"]}
        assert len(owners) == 1, "sub-agents and compactions never share a trace"
        for seg in trace.metadata["segments"]:
            record = records[seg["completion_id"]]
            start, n = seg["start"], seg["length"]
            assert ids[start : start + n] == record.response_ids
            assert lps[start : start + n] == record.response_logprobs
            assert mask[start : start + n] == [1] * n
            trainable[start : start + n] = [1] * n
            seen[record.completion_id] += 1
            if not trace.metadata["retokenization_drift"]:
                assert trace.prompt_ids + ids[:start] == record.prompt_ids, (
                    "context equals what the model saw"
                )
        assert mask == trainable, "only sampled tokens are trainable"
        assert all(lp == 0.0 for lp, m in zip(lps, mask, strict=True) if m == 0)
        flagged = {d["completion_id"] for d in trace.metadata["drift"]}
        assert flagged <= session.drifted
        assert flagged == session.drifted & set(trace.metadata["completion_ids"][:-1])
    assert seen == Counter(list(records)), "every completion lands in exactly one trace"
    assert sum(sum(t.loss_mask) for t in traces) == sum(len(r.response_ids) for r in session.records)
    chains = {session.owner[r.completion_id] for r in session.records}
    assert len(traces) == len(chains), "one trace per append-only chain"


@settings(max_examples=50, deadline=None)
@given(sessions())
def test_per_request_keeps_every_call(session: _Session) -> None:
    traces = build_traces("individual", session.records)
    assert [t.metadata["completion_ids"][0] for t in traces] == [r.completion_id for r in session.records]
    for trace, record in zip(traces, session.records, strict=True):
        assert trace.prompt_ids == record.prompt_ids
        assert trace.response_ids == record.response_ids
        assert trace.loss_mask == [1] * len(record.response_ids)
        assert trace.response_logprobs == record.response_logprobs


def _record(
    i: int, prompt: list[int], response: list[int], messages: int, finish: str = "stop"
) -> CompletionRecord:
    return CompletionRecord(
        completion_id=f"c{i}",
        session_id="s",
        index=i,
        request_messages=[{"role": "user", "content": "x"}] * messages,
        prompt_ids=prompt,
        response_ids=response,
        response_logprobs=[-0.5] * len(response),
        finish_reason=finish,
    )


def test_link_without_end_of_turn_starts_a_new_trace_instead_of_dropping() -> None:
    first = _record(0, [1, 7, 5], [20, 21, EOT], 1)
    # the harness appended to the prompt without closing the assistant turn
    second = _record(1, [1, 7, 5, 20, 21, 30, 31], [40, EOT], 3)
    third = _record(2, [1, 7, 5, 20, 21, 30, 31, 40, EOT, 50, 5], [60, EOT], 5)
    traces = build_traces("prefix_merging", [first, second, third], eot_token_id=EOT)
    assert [t.metadata["completion_ids"] for t in traces] == [["c0"], ["c1", "c2"]]
    assert traces[1].metadata["split_reason"] == "no_end_of_turn"
    assert traces[1].response_ids == [40, EOT, 50, 5, 60, EOT]
    assert traces[1].loss_mask == [1, 1, 0, 0, 1, 1]


def test_truncated_turn_keeps_the_closing_token_masked() -> None:
    first = _record(0, [1, 5], [20, 21], 1, finish="length")
    second = _record(1, [1, 5, 20, 21, EOT, 9, 5], [30, EOT], 3)
    (trace,) = build_traces("prefix_merging", [first, second], eot_token_id=EOT)
    assert trace.response_ids == [20, 21, EOT, 9, 5, 30, EOT]
    assert trace.loss_mask == [1, 1, 0, 0, 0, 1, 1]


def test_drift_is_flagged_or_split_on_request() -> None:
    first = _record(0, [1, 5], [20, 21, EOT], 1)
    second = _record(1, [1, 5, 20, 22, EOT, 9, 5], [30, EOT], 3)
    (flagged,) = build_traces("prefix_merging", [first, second], eot_token_id=EOT)
    assert flagged.metadata["retokenization_drift"] is True
    assert flagged.metadata["drift"][0] == {
        "completion_id": "c0",
        "sampled_len": 2,
        "rendered_len": 2,
        "first_mismatch": 1,
    }
    split = build_traces("prefix_merging", [first, second], eot_token_id=EOT, on_drift="split")
    assert [t.metadata["split_reason"] for t in split] == [None, "retokenization_drift"]


def test_end_of_turn_is_detected_from_stopped_calls() -> None:
    records = [_record(0, [1], [5, 9], 1), _record(1, [2], [6, 9], 1), _record(2, [3], [7, 8], 1, "length")]
    assert detect_end_of_turn(records) == 9
    assert detect_end_of_turn([records[2]]) is None


def test_discounting_runs_in_reverse_insertion_order() -> None:
    assert discount_rewards([None, None, 1.0], 0.9) == pytest.approx([0.81, 0.9, 1.0])
    assert discount_rewards([0.5, None, 1.0], 0.5) == pytest.approx([0.75, 0.5, 1.0])
    with pytest.raises(ValueError):
        discount_rewards([1.0], 1.5)


def test_export_discount_sets_trace_rewards() -> None:
    records = [_record(i, [1, i], [5, EOT], 1) for i in range(3)]
    records[2].reward = 1.0
    traces = build_traces("per_request", records, discount=0.5, metadata={"policy_version": 3})
    assert [t.reward for t in traces] == pytest.approx([0.25, 0.5, 1.0])
    assert traces[0].metadata["policy_version"] == 3


def test_unknown_builder_is_refused() -> None:
    assert {"per_request", "prefix_merging", "individual", "concat"} <= set(builder_names())
    with pytest.raises(ValueError, match="unknown builder"):
        build_traces("nope", [])


def test_calls_without_token_ids_are_skipped_not_invented() -> None:
    empty = CompletionRecord(completion_id="c0", session_id="s")
    assert build_traces("per_request", [empty]) == []
    assert build_traces("prefix_merging", [empty]) == []


def _tool_turn(arguments: str) -> dict[str, Any]:
    call = {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": arguments}}
    return {"role": "assistant", "content": "", "tool_calls": [call]}


def _tool_link(echoed: dict[str, Any]) -> list[CompletionRecord]:
    user = {"role": "user", "content": "fix it"}
    first = _record(0, [1, 5], [20, 21, EOT], 1).model_copy(
        update={"request_messages": [user], "response_message": _tool_turn('{"command":"ls","timeout":5}')}
    )
    tool = {"role": "tool", "tool_call_id": "call_1", "content": "ok"}
    # the harness re-sent the call, the server rendered it to other tokens (22 where 21 was sampled)
    second = _record(1, [1, 5, 20, 22, EOT, 9, 5], [30, EOT], 3).model_copy(
        update={"request_messages": [user, echoed, tool]}
    )
    return [first, second]


def test_reserialized_tool_arguments_merge_without_drift() -> None:
    # pi / opencode / claude_code send arguments back re-dumped: other key order and spacing
    records = _tool_link(_tool_turn('{"timeout": 5, "command": "ls"}'))
    # these ids are no tokenizer's text: the messages decide (tests/model_side/test_merged_meaning.py
    # reads real rendered tokens)
    (trace,) = build_traces("prefix_merging", records, eot_token_id=EOT, compare_rendered=False)
    assert trace.metadata["retokenization_drift"] is False
    assert trace.metadata["reserialized"] == ["c0"]
    assert trace.response_ids == [20, 21, EOT, 9, 5, 30, EOT]  # the sampled tokens stand
    assert trace.loss_mask == [1, 1, 1, 0, 0, 1, 1]


def test_content_as_text_parts_is_the_same_turn() -> None:
    first, second = _tool_link({"role": "assistant", "content": [{"type": "text", "text": "done"}]})
    first = first.model_copy(update={"response_message": {"role": "assistant", "content": "done"}})
    (trace,) = build_traces("prefix_merging", [first, second], eot_token_id=EOT, compare_rendered=False)
    assert trace.metadata["reserialized"] == ["c0"]
    assert trace.metadata["retokenization_drift"] is False


@pytest.mark.parametrize(
    "edited",
    [
        _tool_turn('{"command": "rm -rf /", "timeout": 5}'),  # the harness changed the arguments
        {**_tool_turn('{"command":"ls","timeout":5}'), "content": "I will list files"},
        {"role": "assistant", "content": ""},  # the call was dropped from history
    ],
)
def test_edited_history_is_still_drift(edited: dict[str, Any]) -> None:
    (trace,) = build_traces("prefix_merging", _tool_link(edited), eot_token_id=EOT)
    assert trace.metadata["retokenization_drift"] is True
    assert trace.metadata["reserialized"] == []


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.text(max_size=6), _JSON, max_size=5), st.randoms(use_true_random=False))
def test_canonical_turn_ignores_key_order_and_spacing(args: dict[str, Any], rnd: Any) -> None:
    items = list(args.items())
    rnd.shuffle(items)
    resent = json.dumps(dict(items), indent=rnd.choice([None, 2]), separators=rnd.choice([None, (",", ":")]))
    assert canonical_turn(_tool_turn(json.dumps(args))) == canonical_turn(_tool_turn(resent))
