"""TokenConversation: sampled ids are kept as sampled, and appending messages tokenizes only them."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from farm.agent.conversation import TokenConversation
from farm.chat.tokenizer import ChatTokenizer
from farm.inference.generation import FinishReason, Generation
from tests.tool_schemas import PYTHON_TOOLS

text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=40)


def generation(ids: list[int], logprob: float, finish_reason: FinishReason = "stop") -> Generation:
    """What a backend returns having sampled `ids`, each at `logprob`."""
    logprobs = [logprob] * len(ids)
    return Generation(token_ids=ids, logprobs=logprobs, finish_reason=finish_reason, backend="test")


def sampled(tok: ChatTokenizer, message: dict) -> Generation:
    return generation(tok.encode(tok.assistant_text(message)), -0.5)


@settings(max_examples=80, deadline=None)
@given(question=text, turns=st.lists(st.tuples(text, text), min_size=1, max_size=3))
def test_incremental_context_is_the_canonical_conversation(question: str, turns: list) -> None:
    """When the policy samples exactly the canonical rendering, the context built turn by turn is the
    whole conversation's render, as text; masks and logprobs line up, and the sampled ids stay as
    sampled. (As ids it may differ: BPE can merge across a turn boundary when the whole text is
    encoded at once, e.g. "assistant\n" + "\n..." -> "\n\n"; that is why sampled ids are kept.)"""
    tok = ChatTokenizer.load()
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": question}]
    conv = TokenConversation(tok, messages, PYTHON_TOOLS)
    for i, (reply, observation) in enumerate(turns):
        assistant = {"role": "assistant", "content": reply}
        conv.add_sampled(sampled(tok, assistant), assistant)
        if i < len(turns) - 1:
            conv.add_messages([{"role": "user", "content": observation}])
    # the full render may add a separator after the last turn, so compare the prefix
    full = tok.render(conv.messages, PYTHON_TOOLS)
    assert full.startswith(tok.decode(conv.context_ids))
    assert conv.prompt_ids == tok.apply_chat_template(messages, tools=PYTHON_TOOLS)
    assert len(conv.response_ids) == len(conv.loss_mask) == len(conv.logprobs)
    assert all(lp == 0.0 for lp, m in zip(conv.logprobs, conv.loss_mask, strict=True) if m == 0)
    assert conv.sampled_tokens == sum(
        len(sampled(tok, {"role": "assistant", "content": r}).token_ids) for r, _ in turns
    )


def test_truncated_turn_is_closed_with_a_masked_end_of_turn() -> None:
    tok = ChatTokenizer.load()
    conv = TokenConversation(tok, [{"role": "user", "content": "hi"}], [])
    cut = tok.encode("partial answer")
    conv.add_sampled(generation(cut, -1.0, "length"), {"role": "assistant", "content": "partial answer"})
    conv.add_messages([{"role": "user", "content": "go on"}])
    n = len(cut)
    assert conv.response_ids[:n] == cut and conv.loss_mask[:n] == [1] * n
    assert conv.response_ids[n] == tok.eos_token_id and conv.loss_mask[n] == 0
