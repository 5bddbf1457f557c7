"""Chat templates that rewrite earlier turns the way real templates are known to, built by editing the
shipped farm-tiny template (which is prefix-stable by design) one behaviour at a time.

- drop_reasoning: think blocks of assistant turns before the last user turn vanish (Qwen3, DeepSeek-R1).
- date_header: the system turn carries the current time, re-rendered on every call (Llama 3.x's
  "Today Date", here with microseconds so two renders always differ).
- reserialize_args: tool-call arguments pass through `tojson`, so a JSON string argument is quoted again
  (Qwen2.5/Hermes templates apply `tojson` to whatever `arguments` holds).
- tools_at_last_user: the tool list is injected into the last user turn instead of the system turn, so
  it moves as the conversation grows (Mistral's instruct templates put `[AVAILABLE_TOOLS]` there).
"""

from __future__ import annotations

import copy

from farm.chat.tokenizer import ChatTokenizer

_BASE = ChatTokenizer.load()
_T = _BASE.hf.chat_template
assert isinstance(_T, str)


def _edit(template: str, old: str, new: str) -> str:
    assert template.count(old) == 1, old
    return template.replace(old, new)


_LAST_USER = (
    "{%- set ns = namespace(last_user=-1) -%}"
    "{%- for m in messages -%}{%- if m.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}"
    "{%- endif -%}{%- endfor -%}\n"
)

VARIANTS: dict[str, str] = {
    "drop_reasoning": _LAST_USER
    + _edit(_T, "{%- if reasoning -%}<think>", "{%- if reasoning and loop.index0 > ns.last_user -%}<think>"),
    "date_header": _edit(
        _T,
        "<|im_start|>system\n",
        "<|im_start|>system\nNow: {{ strftime_now('%Y-%m-%d %H:%M:%S.%f') }}\n",
    ),
    "reserialize_args": _edit(
        _T,
        "{% if fn.arguments is string %}{{ fn.arguments }}{% else %}{{ fn.arguments | tojson }}{% endif %}",
        "{{ fn.arguments | tojson }}",
    ),
    "tools_at_last_user": _LAST_USER
    + _edit(
        _edit(_T, "{%- if tools %}\n\n\n# Tools", "{%- if false %}"),
        "<|im_start|>{{ message.role }}\n",
        "<|im_start|>{{ message.role }}\n{% if tools and loop.index0 == ns.last_user %}[TOOLS]"
        "{{ tools | tojson }}[/TOOLS]\n{% endif %}",
    ),
}


def variant(name: str) -> ChatTokenizer:
    hf = copy.deepcopy(_BASE.hf)
    hf.chat_template = VARIANTS[name]
    return ChatTokenizer(hf, f"farm-tiny+{name}")
