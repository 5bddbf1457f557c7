"""Read a rendered prompt back into OpenAI-style messages, in each tool-call family's layout.

The reference LLM server gets only token ids; its scripted policy decodes them and reads the conversation
with `read_prompt`, by the layout of the tokenizer's family (farm/chat/families). Hermes prompts are
ChatML (farm/llm/chatml.py). The other layouts:

- DeepSeek V3/R1 (the layout of DeepSeek-V3's chat template, deepseek-ai/DeepSeek-V3
  tokenizer_config.json; tokens written here with ASCII bars and underscores): BOS, the system text,
  then `<|User|>text`, `<|Assistant|>text<|end_of_sentence|>`, tool results as
  `<|tool_outputs_begin|><|tool_output_begin|>text<|tool_output_end|>...<|tool_outputs_end|>`
  after which the next assistant turn follows with no `<|Assistant|>` of its own.
- Llama 3.1 (meta-llama/Llama-3.1-8B-Instruct's template, farm/chat/assets/templates): turns are
  `<|start_header_id|>ROLE<|end_header_id|>\n\nTEXT<|eot_id|>` (`<|eom_id|>` ends one that waits for a
  built-in tool); the tools are listed as indented JSON in the first user turn (or the system turn), and a
  tool's result is an `ipython` turn, JSON-encoded when it is text.
- Kimi K2 (moonshotai/Kimi-K2-Instruct's template): `<|im_user|>user<|im_middle|>TEXT<|im_end|>`, the
  tools as JSON in a `tool_declare` system turn, a result as a system turn named after the tool that
  starts `## Return of functions.NAME:N`.
- DeepSeek V3.1 (deepseek-ai/DeepSeek-V3.1's template): the V3 layout, with `<think></think>` after
  `<|Assistant|>` and results as bare `<|tool_output_begin|>...<|tool_output_end|>`.
- GLM-4.5 / 4.6 (zai-org/GLM-4.6's template): `[gMASK]<sop>`, then turns opened by `<|system|>`,
  `<|user|>`, `<|assistant|>` and closed by nothing but the next one; the tools as JSON lines inside
  `<tools>` in the first system turn; results after `<|observation|>` as
  `\n<tool_response>\nTEXT\n</tool_response>` blocks. The generation prompt is a bare `<|assistant|>`.
- Gemma 3 (google/gemma-3-*-it's template, farm/chat/assets/templates/google-gemma-3-it.jinja): `<bos>`,
  then `<start_of_turn>ROLE\nTEXT<end_of_turn>\n` with ROLE `user` or `model`, the system prompt in front
  of the first user turn's text; no tool list and no tool role: the farm writes results into a user turn as
  `<tool_response>` blocks (ChatTokenizer.template_messages), read back here as tool messages.
- Mistral (mistral-common's InstructTokenizerV3, mistral_common/tokens/tokenizers/instruct.py):
  `<s>`, `[AVAILABLE_TOOLS]json[/AVAILABLE_TOOLS]` before the last user turn, `[INST]text[/INST]`,
  the answer then `</s>`, tool results as `[TOOL_RESULTS]{"content": ..., "call_id": ...}[/TOOL_RESULTS]`.
  From v7 on the system prompt is `[SYSTEM_PROMPT]text[/SYSTEM_PROMPT]` and a result is
  `[TOOL_RESULTS]id[TOOL_CONTENT]text[/TOOL_RESULTS]`; v13 writes it as `[TOOL_RESULTS]text[/TOOL_RESULTS]`
  and lists the tools before the first user turn.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from farm.chat.families.deepseek import ds_token
from farm.chat.families.hermes import TOOL_RESPONSE_CLOSE, TOOL_RESPONSE_OPEN
from farm.chat.tokenizer import ChatTokenizer
from farm.chat.tool_parsers import parse_with
from farm.llm.chatml import ParsedConversation, parse_chatml, read_tools

DS_BOS, DS_EOS = ds_token("begin_of_sentence"), ds_token("end_of_sentence")
DS_USER, DS_ASSISTANT = "<\uff5cUser\uff5c>", "<\uff5cAssistant\uff5c>"
DS_OUTPUTS = (ds_token("tool_outputs_begin"), ds_token("tool_outputs_end"))
DS_OUTPUT = (ds_token("tool_output_begin"), ds_token("tool_output_end"))
M_BOS, M_EOS = "<s>", "</s>"
M_INST = ("[INST]", "[/INST]")
M_TOOLS = ("[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]")
M_RESULTS = ("[TOOL_RESULTS]", "[/TOOL_RESULTS]")
M_SYSTEM = ("[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]")
M_CONTENT = "[TOOL_CONTENT]"
_DS_TOOL_NAME = re.compile(r"^### (\S+)$", re.MULTILINE)


def read_prompt(tokenizer: ChatTokenizer, text: str) -> ParsedConversation:
    """A rendered conversation read back into messages, its assistant turns' tool calls read with the
    tokenizer's parser."""
    reader = _READERS.get(tokenizer.family, parse_chatml)
    return reader(text, tokenizer.tool_parser)


def _assistant(body: str, eos: str, parser: str, tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """`tools` type the arguments of formats that write them as text (GLM's, Qwen3-Coder's)."""
    return parse_with(parser, body, eos, tools).message()


def _until(text: str, end: str) -> tuple[str, bool, str]:
    inside, found, rest = text.partition(end)
    return inside, bool(found), rest


def _open_answer(parsed: ParsedConversation, rest: str, eos: str, parser: str) -> str:
    """An assistant answer at `rest`: a message if closed by `eos`, else the open generation turn."""
    body, closed, rest = _until(rest, eos)
    if closed:
        parsed.messages.append(_assistant(body, eos, parser))
    else:
        parsed.open_role, parsed.open_text = "assistant", body
    return rest


def parse_deepseek_prompt(text: str, parser: str = "deepseek_v3") -> ParsedConversation:
    parsed = ParsedConversation()
    rest = text.removeprefix(DS_BOS)
    system, _, rest = rest.partition(DS_USER)
    rest = DS_USER + rest if _ else ""
    if system:
        head, tools_found, section = system.partition("## Tools")
        if tools_found:
            names = _DS_TOOL_NAME.findall(section)
            parsed.tools = [{"type": "function", "function": {"name": name}} for name in names]
        if head.strip():
            parsed.messages.append({"role": "system", "content": head.strip()})
    while rest:
        if rest.startswith(DS_USER):
            cut = [
                i
                for i in (rest.find(DS_ASSISTANT), rest.find(DS_OUTPUTS[0]), rest.find(DS_OUTPUT[0]))
                if i > 0
            ]
            end = min(cut) if cut else len(rest)
            parsed.messages.append({"role": "user", "content": rest[len(DS_USER) : end]})
            rest = rest[end:]
        elif rest.startswith(DS_ASSISTANT):
            rest = _open_answer(parsed, rest[len(DS_ASSISTANT) :], DS_EOS, parser)
        elif rest.startswith(DS_OUTPUTS[0]):
            outputs, _, rest = _until(rest[len(DS_OUTPUTS[0]) :], DS_OUTPUTS[1])
            for chunk in outputs.split(DS_OUTPUT[0])[1:]:
                parsed.messages.append({"role": "tool", "content": chunk.partition(DS_OUTPUT[1])[0]})
            if not rest.startswith((DS_USER, DS_ASSISTANT, DS_OUTPUTS[0])):
                rest = _open_answer(parsed, rest, DS_EOS, parser)
        elif rest.startswith(DS_OUTPUT[0]):  # V3.1: results without the outputs wrapper
            while rest.startswith(DS_OUTPUT[0]):
                output, _, rest = _until(rest[len(DS_OUTPUT[0]) :], DS_OUTPUT[1])
                parsed.messages.append({"role": "tool", "content": output})
            if not rest.startswith((DS_USER, DS_ASSISTANT, DS_OUTPUTS[0], DS_OUTPUT[0])):
                rest = _open_answer(parsed, rest, DS_EOS, parser)
        else:  # text outside any turn: keep it visible rather than drop it
            parsed.messages.append({"role": "user", "content": rest})
            break
    return parsed


def parse_mistral_prompt(text: str, parser: str = "mistral") -> ParsedConversation:
    parsed = ParsedConversation()
    rest = text.removeprefix(M_BOS)
    while rest:
        if rest.startswith(M_SYSTEM[0]):
            system, _, rest = _until(rest[len(M_SYSTEM[0]) :], M_SYSTEM[1])
            parsed.messages.append({"role": "system", "content": system})
        elif rest.startswith(M_TOOLS[0]):
            section, _, rest = _until(rest[len(M_TOOLS[0]) :], M_TOOLS[1])
            parsed.tools = _json_list(section)
        elif rest.startswith(M_INST[0]):
            content, _, rest = _until(rest[len(M_INST[0]) :], M_INST[1])
            parsed.messages.append({"role": "user", "content": content})
            rest = _answer_unless_marker(parsed, rest, parser)
        elif rest.startswith(M_RESULTS[0]):
            result, _, rest = _until(rest[len(M_RESULTS[0]) :], M_RESULTS[1])
            parsed.messages.append({"role": "tool", "content": _tool_result(result)})
            rest = _answer_unless_marker(parsed, rest, parser)
        else:
            parsed.messages.append({"role": "user", "content": rest})
            break
    return parsed


def _answer_unless_marker(parsed: ParsedConversation, rest: str, parser: str) -> str:
    if rest.startswith((M_SYSTEM[0], M_TOOLS[0], M_INST[0], M_RESULTS[0])):
        return rest
    return _open_answer(parsed, rest, M_EOS, parser)


def _json_list(section: str) -> list[dict[str, Any]]:
    try:
        items = json.loads(section)
    except json.JSONDecodeError:
        return []
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


def _tool_result(raw: str) -> str:
    """The `content` of mistral-common's result object (it JSON-decodes content that is JSON), or from v7
    on the text after the call id."""
    if M_CONTENT in raw:
        return raw.partition(M_CONTENT)[2]
    try:
        payload = json.loads(raw)
    except json.JSONDecodeError:
        return raw
    content = payload.get("content", raw) if isinstance(payload, dict) else raw
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)


L_HEADER, L_HEADER_END = "<|start_header_id|>", "<|end_header_id|>"
L_ENDS = ("<|eot_id|>", "<|eom_id|>")
_LLAMA_TOOLS_INTRO = "Given the following functions, please respond with a JSON for a function call"
_LLAMA_SYSTEM_LINES = re.compile(
    r"^(?:Environment: ipython\n|Tools: [^\n]*\n\n|Cutting Knowledge Date: [^\n]*\n|Today Date: [^\n]*\n\n)"
)


def parse_llama_prompt(text: str, parser: str) -> ParsedConversation:
    parsed = ParsedConversation()
    for chunk in text.split(L_HEADER)[1:]:
        role, _, body = chunk.partition(L_HEADER_END)
        body = body.removeprefix("\n\n")
        ends = [i for i in (body.find(end) for end in L_ENDS) if i >= 0]
        if not ends:
            parsed.open_role, parsed.open_text = role, body
            break
        body = body[: min(ends)]
        if role == "system":
            while (line := _LLAMA_SYSTEM_LINES.match(body)) is not None:
                body = body[line.end() :]
            if body.startswith("You have access to the following functions."):
                body = _llama_tools(parsed, body)
            if body.strip():
                parsed.messages.append({"role": "system", "content": body})
        elif role == "user" and body.startswith(_LLAMA_TOOLS_INTRO) and not parsed.tools:
            parsed.messages.append({"role": "user", "content": _llama_tools(parsed, body)})
        elif role in ("ipython", "tool"):
            parsed.messages.append({"role": "tool", "content": _json_text(body)})
        elif role == "assistant":
            parsed.messages.append(_assistant(body, "", parser))
        else:
            parsed.messages.append({"role": role, "content": body})
    return parsed


def _llama_tools(parsed: ParsedConversation, body: str) -> str:
    """Reads the tools (indented JSON, each followed by a blank line); returns the text after them."""
    decoder = json.JSONDecoder()
    rest = body.partition("Do not use variables.\n\n")[2]
    while rest.startswith("{"):
        try:
            tool, end = decoder.raw_decode(rest)
        except json.JSONDecodeError:
            break
        if isinstance(tool, dict):
            parsed.tools.append(tool)
        rest = rest[end:].removeprefix("\n\n")
    return rest


def _json_text(body: str) -> str:
    """A result the template JSON-encoded (Llama's tojson of text), decoded back to its text."""
    try:
        value = json.loads(body)
    except json.JSONDecodeError:
        return body
    return value if isinstance(value, str) else body


K_TURNS = re.compile(r"(<\|im_system\|>|<\|im_user\|>|<\|im_assistant\|>)")
K_MIDDLE, K_END = "<|im_middle|>", "<|im_end|>"
_K_RETURN = re.compile(r"^## Return of \S*?(?:\\n|\n)")
"""A result's header; one published Kimi K2 template writes its line break as the two characters `\\n`."""


def parse_kimi_prompt(text: str, parser: str) -> ParsedConversation:
    parsed = ParsedConversation()
    parts = K_TURNS.split(text)
    for opener, chunk in zip(parts[1::2], parts[2::2], strict=True):
        name, _, body = chunk.partition(K_MIDDLE)
        body, closed, _ = body.partition(K_END)
        kind = {"<|im_user|>": "user", "<|im_assistant|>": "assistant"}.get(opener, "system")
        if not closed:
            parsed.open_role, parsed.open_text = kind, body
            break
        if kind == "system" and name == "tool_declare":
            parsed.tools = _json_list(body)
        elif kind == "system" and (found := _K_RETURN.match(body)) is not None:
            parsed.messages.append({"role": "tool", "content": body[found.end() :]})
        elif kind == "assistant":
            parsed.messages.append(_assistant(body, "", parser))
        else:
            parsed.messages.append({"role": kind, "content": body})
    return parsed


G_TURNS = re.compile(r"(<\|system\|>|<\|user\|>|<\|assistant\|>|<\|observation\|>)")
G_RESPONSE = ("\n<tool_response>\n", "\n</tool_response>")
_G_TOOLS = "\n# Tools\n\n"


def parse_glm_prompt(text: str, parser: str) -> ParsedConversation:
    parsed = ParsedConversation()
    parts = G_TURNS.split(text)
    turns = list(zip(parts[1::2], parts[2::2], strict=True))
    for number, (opener, body) in enumerate(turns, 1):
        role = opener[2:-2]
        if role == "assistant" and number == len(turns):  # nothing opened after it: the generation turn
            parsed.open_role, parsed.open_text = "assistant", body
        elif role == "system" and not parsed.messages and body.startswith(_G_TOOLS):
            parsed.tools = read_tools(body)
        elif role == "observation":
            for block in body.split(G_RESPONSE[0])[1:]:
                parsed.messages.append({"role": "tool", "content": block.partition(G_RESPONSE[1])[0]})
        elif role == "assistant":
            parsed.messages.append(_assistant(body, "", parser, parsed.tools))
        else:
            parsed.messages.append({"role": role, "content": body.removeprefix("\n")})
    return parsed


G_START, G_END = "<start_of_turn>", "<end_of_turn>"


def parse_gemma_prompt(text: str, parser: str) -> ParsedConversation:
    parsed = ParsedConversation()
    for chunk in text.split(G_START)[1:]:
        role, _, body = chunk.partition("\n")
        role = "assistant" if role == "model" else role
        body, closed, _ = _until(body, G_END)
        if not closed:
            parsed.open_role, parsed.open_text = role, body
            break
        if role == "assistant":
            parsed.messages.append(_assistant(body, G_END, parser))
        elif role == "user":
            parsed.messages += _gemma_user_turn(body)
        else:
            parsed.messages.append({"role": role, "content": body})
    return parsed


def _gemma_user_turn(body: str) -> list[dict[str, Any]]:
    """A user turn: its leading `<tool_response>` blocks as tool messages, the text after them a user one."""
    out: list[dict[str, Any]] = []
    rest = body
    while rest.startswith(TOOL_RESPONSE_OPEN):
        inside, found, after = rest[len(TOOL_RESPONSE_OPEN) :].partition(TOOL_RESPONSE_CLOSE)
        if not found:
            break
        out.append({"role": "tool", "content": inside})
        rest = after.removeprefix("\n")
    if rest or not out:
        out.append({"role": "user", "content": rest})
    return out


_READERS: dict[str, Callable[[str, str], ParsedConversation]] = {
    "deepseek": parse_deepseek_prompt,
    "mistral": parse_mistral_prompt,
    "llama": parse_llama_prompt,
    "kimi": parse_kimi_prompt,
    "glm": parse_glm_prompt,
    "gemma": parse_gemma_prompt,
}
"""Each family's layout reader (the others read as ChatML)."""
