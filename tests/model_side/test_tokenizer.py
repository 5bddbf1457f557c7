"""The shipped tokenizer and chat template: offline loading, ids, round trips, prefix stability."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer

from farm.chat.tokenizer import SHIPPED_DIR, ChatTokenizer
from tests.model_side.strategies import conversation, plain_text, tools

ADDED = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]


def test_shipped_assets_load_offline_with_auto_tokenizer() -> None:
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        assert (SHIPPED_DIR / name).is_file()
    hf = AutoTokenizer.from_pretrained(str(SHIPPED_DIR), local_files_only=True)
    assert hf.eos_token == "<|im_end|>"
    assert 4000 <= len(hf) <= 8192
    assert hf.chat_template is not None


def test_special_and_added_tokens_are_single_ids(tokenizer: ChatTokenizer) -> None:
    assert tokenizer.eot_token == "<|im_end|>"
    assert tokenizer.encode("<|im_end|>") == [tokenizer.eos_token_id]
    for token in ["<|endoftext|>", "<|im_start|>", *ADDED]:
        ids = tokenizer.encode(token)
        assert len(ids) == 1, token
        assert tokenizer.decode(ids) == token
    assert tokenizer.is_special(tokenizer.eos_token_id)
    assert not tokenizer.is_special(tokenizer.encode("<tool_call>")[0])


def test_load_is_cached_per_path(tokenizer: ChatTokenizer) -> None:
    assert ChatTokenizer.load() is tokenizer
    assert ChatTokenizer.load(str(SHIPPED_DIR)) is tokenizer
    assert tokenizer.name == "farm-tiny"
    assert tokenizer.vocab_size == len(tokenizer.hf)


def test_no_bos_and_digits_stand_alone(tokenizer: ChatTokenizer) -> None:
    ids = tokenizer.encode("12345")
    assert len(ids) == 5
    assert tokenizer.encode("") == []


@settings(max_examples=150, deadline=None)
@given(text=st.text(alphabet=st.characters(blacklist_categories=("Cs",))))
def test_decode_inverts_encode(tokenizer: ChatTokenizer, text: str) -> None:
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_render_shape(tokenizer: ChatTokenizer) -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2 + 3?"},
        {
            "role": "assistant",
            "content": "Let me run it.",
            "tool_calls": [
                {"type": "function", "function": {"name": "python", "arguments": '{"code": "1"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "5"},
    ]
    python_tool = {"type": "function", "function": {"name": "python", "parameters": {}}}
    text = tokenizer.render(messages, [python_tool], add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools\n")
    assert '<tools>\n{"type": "function", "function": {"name": "python", "parameters": {}}}\n</tools>' in text
    assert (
        '<|im_start|>assistant\nLet me run it.\n<tool_call>\n{"name": "python", "arguments": {"code": "1"}}\n'
        "</tool_call><|im_end|>\n"
    ) in text
    assert "<|im_start|>tool\n<tool_response>\n5\n</tool_response><|im_end|>\n" in text
    assert text.endswith("<|im_start|>assistant\n")
    assert tokenizer.render([]) == ""
    assert tokenizer.render([{"role": "user", "content": "hi"}]) == "<|im_start|>user\nhi<|im_end|>\n"


@settings(max_examples=50, deadline=None)
@given(messages=conversation(), tool_list=tools)
def test_template_is_prefix_stable(tokenizer: ChatTokenizer, messages: list, tool_list: list) -> None:
    full = tokenizer.render(messages, tool_list)
    with_prompt = tokenizer.render(messages, tool_list, add_generation_prompt=True)
    full_ids = tokenizer.encode(with_prompt)
    for k in range(len(messages) + 1):
        head = tokenizer.render(messages[:k], tool_list)
        assert full.startswith(head)
        assert with_prompt.startswith(head)
        # Turns end at special tokens, so the prefix holds for ids too.
        head_ids = tokenizer.encode(head)
        assert full_ids[: len(head_ids)] == head_ids


@settings(max_examples=25, deadline=None)
@given(messages=conversation(), tool_list=tools, reply=plain_text)
def test_continuation_ids_extend_sampled_ids(
    tokenizer: ChatTokenizer, messages: list, tool_list: list, reply: str
) -> None:
    prompt_ids = tokenizer.apply_chat_template(messages, tool_list)
    assistant = {"role": "assistant", "content": reply}
    sampled = tokenizer.encode(tokenizer.assistant_text(assistant))
    assert sampled[-1] == tokenizer.eos_token_id
    new = [{"role": "user", "content": "next"}]
    continued = prompt_ids + sampled + tokenizer.continuation_ids(new, tool_list)
    # Text, not ids: sampled ids never merge with the prompt's (a reply of "\n" after the prompt's
    # "assistant\n" is two tokens as sampled, one "\n\n" token when the whole text is tokenized).
    assert tokenizer.decode(continued) == tokenizer.render(
        [*messages, assistant, *new], tool_list, add_generation_prompt=True
    )


def test_assistant_text_matches_tool_call_format(tokenizer: ChatTokenizer) -> None:
    message = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}],
    }
    assert (
        tokenizer.assistant_text(message)
        == '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call><|im_end|>'
    )
