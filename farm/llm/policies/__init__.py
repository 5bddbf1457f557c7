"""Policies of the reference LLM server, behind one interface (`Policy.sample`)."""

from __future__ import annotations

from pathlib import Path

from farm.chat.tokenizer import ChatTokenizer
from farm.llm.config import ServerConfig
from farm.llm.policies.base import Policy
from farm.llm.policies.scripted import ScriptedPolicy
from farm.llm.policies.scripts import Script, ScriptBook, Step, handler_script_paths, load_scripts

POLICY_NAMES = ("scripted", "tiny")


def make_policy(config: ServerConfig, tokenizer: ChatTokenizer) -> Policy:
    if config.policy == "scripted":
        paths = [Path(p) for p in config.scripts]
        if config.handler_scripts:
            paths += handler_script_paths()
        book = ScriptBook(load_scripts(paths))
        return ScriptedPolicy(tokenizer, book, accuracy=config.accuracy, seed=config.seed)
    if config.policy == "tiny":
        from farm.llm.policies.tiny import TinyPolicy

        return TinyPolicy(tokenizer, seed=config.seed, max_model_len=config.max_model_len)
    raise ValueError(f"unknown policy {config.policy!r}; choose from {', '.join(POLICY_NAMES)}")


__all__ = ["POLICY_NAMES", "Policy", "Script", "ScriptBook", "ScriptedPolicy", "Step", "make_policy"]
