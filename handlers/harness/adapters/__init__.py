"""Harness adapters by name: each turns a session's coordinates into the harness's own config files, env
and non-interactive command (see base.py)."""

from __future__ import annotations

from typing import Any

from handlers.harness.adapters.base import (
    GatewayApi,
    HarnessAdapter,
    HarnessInputs,
    HarnessPlan,
    PlannedFile,
)
from handlers.harness.adapters.claude_code import ClaudeCodeAdapter
from handlers.harness.adapters.codex import CodexAdapter
from handlers.harness.adapters.gemini_cli import GeminiCliAdapter
from handlers.harness.adapters.opencode import OpencodeAdapter
from handlers.harness.adapters.pi import PiAdapter
from handlers.harness.adapters.qwen_code import QwenCodeAdapter
from handlers.harness.adapters.shell import ShellAdapter

ADAPTERS: dict[str, type[HarnessAdapter]] = {
    cls.name: cls
    for cls in (
        ShellAdapter,
        ClaudeCodeAdapter,
        CodexAdapter,
        QwenCodeAdapter,
        GeminiCliAdapter,
        OpencodeAdapter,
        PiAdapter,
    )
}


class UnknownHarness(KeyError):
    def __str__(self) -> str:
        return f"unknown harness {self.args[0]!r}; harnesses: {', '.join(adapter_names())}"


def adapter_names() -> list[str]:
    return sorted(ADAPTERS)


def get_adapter(name: str, options: dict[str, Any] | None = None) -> HarnessAdapter:
    """An adapter instance; `options` are its constructor's keyword arguments (e.g. pi's `api`)."""
    if name not in ADAPTERS:
        raise UnknownHarness(name)
    try:
        return ADAPTERS[name](**(options or {}))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"harness_options: the {name} adapter cannot take {options!r}: {exc}") from None


__all__ = [
    "ADAPTERS",
    "GatewayApi",
    "HarnessAdapter",
    "HarnessInputs",
    "HarnessPlan",
    "PlannedFile",
    "UnknownHarness",
    "adapter_names",
    "get_adapter",
]
