"""Mistral's tokenizers through mistral-common: its bundled tekken vocabularies and its own request
encoding (InstructRequest -> tokens), which is what vLLM's `--tokenizer-mode mistral` feeds the model.

`FARM_TOKENIZER=mistral:<name>` picks one: `v3-tekken` (MistralTokenizer.v3(is_tekken=True), the
Mistral-Nemo tokenizer), a file name under mistral_common/data (e.g. `tekken_240911.json`), or a path to
a tokenizer file. Only files mistral-common ships are used; nothing is downloaded. (The SentencePiece
tokenizers it also ships need the `sentencepiece` package, which the farm does not install.)

The encoding is not prefix-stable, which is why the farm never re-renders history: mistral-common moves
`[AVAILABLE_TOOLS]` and the system prompt to the last user turn, re-serializes tool-call arguments and
JSON-decodes tool results.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import mistral_common
from mistral_common.exceptions import MistralCommonException
from mistral_common.protocol.instruct.normalize import get_normalizer
from mistral_common.protocol.instruct.request import ChatCompletionRequest
from mistral_common.protocol.instruct.validator import ValidationMode
from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy
from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

AnyMistral = MistralTokenizer[Any, Any, Any, Any, Any]
DATA_DIR = Path(mistral_common.__file__).resolve().parent / "data"
_PLACEHOLDER = re.compile(r"<SPECIAL_\d+>")
_MESSAGE_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")
_ID_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def mistral_call_id(seed: str) -> str:
    """A tool-call id in Mistral's shape (nine letters or digits), stable for the same seed."""
    digest = hashlib.sha256(seed.encode()).digest()
    return "".join(_ID_ALPHABET[b % len(_ID_ALPHABET)] for b in digest[:9])


class MistralCodec:
    """Ids, text and conversation encoding of one mistral-common tokenizer (the farm's interface over it is
    farm/chat/tokenizer.py MistralChatTokenizer)."""

    def __init__(self, mistral: AnyMistral, name: str) -> None:
        self.mistral = mistral
        self._inner = mistral.instruct_tokenizer.tokenizer
        self.name = f"mistral:{name}"
        self.eos_token_id = self._inner.eos_id
        self.eot_token = self._inner.id_to_piece(self.eos_token_id)
        self.vocab_size = self._inner.n_words
        specials = {self._inner.id_to_piece(i): i for i in range(self._inner.num_special_tokens)}
        self._specials = {piece: i for piece, i in specials.items() if not _PLACEHOLDER.fullmatch(piece)}
        pieces = sorted(self._specials, key=len, reverse=True)
        self._split = re.compile("(" + "|".join(re.escape(p) for p in pieces) + ")")
        self.hf = MistralHFView(self)
        self._normalizer = get_normalizer(self._inner.version)

    @functools.cached_property
    def system_prompt_moves(self) -> bool:
        """The encoder puts the system prompt in the last user turn (versions before v7), not first."""
        conversation = [
            {"role": "system", "content": "Sys"},
            {"role": "user", "content": "One"},
            {"role": "assistant", "content": "Two"},
            {"role": "user", "content": "Three"},
        ]
        text = self.decode(self.tokens(conversation, None))
        return text.find("Sys") > text.find("Two")

    @classmethod
    def from_name(cls, name: str) -> MistralCodec:
        if name == "v3-tekken":
            return cls(MistralTokenizer.v3(is_tekken=True), name)
        path = Path(name) if Path(name).is_absolute() else DATA_DIR / name
        if not path.is_file():
            shipped = ", ".join(sorted(p.name for p in DATA_DIR.iterdir() if p.name.startswith("tekken")))
            raise ValueError(f"tokenizer 'mistral:{name}': choose v3-tekken, one of {shipped}, or a path")
        try:
            return cls(MistralTokenizer.from_file(str(path), mode=ValidationMode.test), path.name)
        except ImportError as exc:  # the SentencePiece files need a package the farm does not install
            raise ValueError(f"tokenizer 'mistral:{name}': {exc}") from exc

    @property
    def special_tokens(self) -> list[str]:
        return list(self._specials)

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for i, part in enumerate(self._split.split(text)):
            if i % 2:
                ids.append(self._specials[part])
            elif part:
                ids += self._inner.encode(part, bos=False, eos=False)
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        return str(self._inner.decode(list(ids), special_token_policy=SpecialTokenPolicy.KEEP))

    def is_special(self, token_id: int) -> bool:
        return 0 <= token_id < self._inner.num_special_tokens

    def tokens(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None
    ) -> list[int]:
        """The request encoder's own ids for the conversation, as vLLM's mistral mode computes them."""
        request = ChatCompletionRequest.from_openai(
            messages=[_openai_message(m) for m in messages], tools=[dict(t) for t in tools] if tools else None
        )
        # The normalizer without the validator: the validator refuses a conversation that ends with an
        # assistant turn, which assistant_text and continuation_ids render on purpose.
        try:
            instruct = self._normalizer.from_chat_completion_request(request)
            return list(self.mistral.instruct_tokenizer.encode_instruct(instruct).tokens)
        except MistralCommonException as exc:
            # e.g. an assistant turn with neither text nor calls: the format cannot write it. A ValueError
            # is what the callers turn into a 400 (the reference LLM, as vLLM's mistral mode answers).
            raise ValueError(f"the Mistral request encoder refuses this conversation: {exc}") from None


def _openai_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """The keys mistral-common reads; tool calls without an id get one in Mistral's shape."""
    out = {k: message[k] for k in _MESSAGE_KEYS if message.get(k) is not None}
    if out.get("tool_calls"):
        out["tool_calls"] = [_call_with_id(call) for call in out["tool_calls"]]
    if out["role"] == "assistant" and out.get("tool_calls"):
        # v3 has no way to write text and calls in one turn (mistral-common refuses it): the calls win
        out.pop("content", None)
    return out


def _call_with_id(call: Mapping[str, Any]) -> dict[str, Any]:
    function = dict(call.get("function", call))
    arguments = function.get("arguments", {})
    if not isinstance(arguments, str):
        function["arguments"] = json.dumps(arguments, ensure_ascii=False)
    seed = f"{function.get('name')}:{function['arguments']}"
    return {"id": call.get("id") or mistral_call_id(seed), "type": "function", "function": function}


class MistralHFView:
    """The part of a Hugging Face tokenizer's API that callers outside farm/chat read from `.hf`."""

    def __init__(self, tokenizer: MistralCodec) -> None:
        self._tokenizer = tokenizer
        self.pad_token_id: int = tokenizer._inner.pad_id

    @property
    def all_special_tokens(self) -> list[str]:
        return self._tokenizer.special_tokens

    def __len__(self) -> int:
        return self._tokenizer.vocab_size

    def convert_ids_to_tokens(self, ids: Sequence[int]) -> list[str]:
        return [self._tokenizer._inner.id_to_piece(i) for i in ids]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False, **_: Any) -> str:
        if skip_special_tokens:
            ids = [i for i in ids if not self._tokenizer.is_special(i)]
        return self._tokenizer.decode(ids)

    def batch_decode(self, batch: Sequence[Sequence[int]], skip_special_tokens: bool = False) -> list[str]:
        return [self.decode(ids, skip_special_tokens) for ids in batch]
