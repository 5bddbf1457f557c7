"""The shipped harness scripts: each harness CLI, offering its own tools, gets a script in its own tool
names (one shell call that fixes calc.py and runs the test, then a final answer).

Tool lists are each CLI's default tool names: pi (badlogic/pi-mono, coding-agent tools), claude_code
(Claude Code tool reference), codex (openai/codex codex-rs/core tools: shell, shell_command, exec_command
under unified exec), gemini_cli (google-gemini/gemini-cli packages/core/src/tools), qwen_code
(QwenLM/qwen-code-docs tools/shell.md: `is_background` is required), opencode (sst/opencode tool registry).
"""

from __future__ import annotations

import pytest

from farm.chat.tokenizer import ChatTokenizer
from farm.llm.chatml import ParsedConversation
from farm.llm.policies.scripted import ScriptedPolicy
from farm.llm.policies.scripts import ScriptBook, handler_script_paths, load_scripts

INSTRUCTION = "Fix the add function in calc.py so that test_calc.py passes."
FIX = "sed -i 's/return a - b/return a + b/' calc.py && python3 test_calc.py"

HARNESS_TOOLS: dict[str, tuple[list[str], str]] = {
    "pi": (["read", "bash", "edit", "write"], "read"),
    "claude_code": (["Task", "Bash", "Glob", "Grep", "Read", "Edit", "Write", "TodoWrite"], "Bash"),
    "codex_shell": (["shell", "apply_patch", "update_plan"], "shell"),
    "codex_shell_command": (["shell_command", "apply_patch", "update_plan"], "shell_command"),
    "codex_unified_exec": (["exec_command", "write_stdin", "apply_patch"], "exec_command"),
    "gemini_cli": (
        ["list_directory", "read_file", "glob", "replace", "write_file", "run_shell_command"],
        "run_shell_command",
    ),
    "qwen_code": (["read_file", "edit", "glob", "run_shell_command", "todo_write"], "run_shell_command"),
    "opencode": (["bash", "edit", "glob", "grep", "list", "read", "write", "todowrite"], "bash"),
}


@pytest.fixture(scope="module")
def policy() -> ScriptedPolicy:
    paths = [p for p in handler_script_paths() if p.parent.parent.name == "harness"]
    assert paths, "handlers/harness/scripts/*.jsonl not found"
    return ScriptedPolicy(ChatTokenizer.load(), ScriptBook(load_scripts(paths)), accuracy=1.0)


def _conversation(tools: list[str], messages: list[dict]) -> ParsedConversation:
    offered = [{"type": "function", "function": {"name": t, "parameters": {"type": "object"}}} for t in tools]
    return ParsedConversation(messages=messages, tools=offered, open_role="assistant")


@pytest.mark.parametrize("harness", sorted(HARNESS_TOOLS))
def test_each_harness_gets_a_script_in_its_own_tool_names(policy: ScriptedPolicy, harness: str) -> None:
    tools, first_tool = HARNESS_TOOLS[harness]
    user = {"role": "user", "content": INSTRUCTION}
    first = policy.next_turn(_conversation(tools, [user]), seed=0).message
    (call,) = first["tool_calls"]
    assert call["function"]["name"] == first_tool
    if harness != "pi":  # pi reads and edits with its own tools; the others fix and test in one call
        arguments = call["function"]["arguments"]
        command = arguments.get("command", arguments.get("cmd"))
        assert FIX in (command if isinstance(command, str) else command[-1])
        done = [user, {**first, "tool_calls": [{"id": "c1", **call}]}, {"role": "tool", "content": "ok"}]
        final = policy.next_turn(_conversation(tools, done), seed=0).message
        assert "tool_calls" not in final and "a + b" in final["content"]
    if harness == "qwen_code":
        assert call["function"]["arguments"]["is_background"] is False


def test_instruction_inside_a_list_of_parts_matches(policy: ScriptedPolicy) -> None:
    # codex sends its context first and the instruction later, claude_code sends content as parts
    tools, _ = HARNESS_TOOLS["claude_code"]
    parts = [
        {"type": "text", "text": "<system-reminder>context</system-reminder>"},
        {"type": "text", "text": INSTRUCTION},
    ]
    messages = [{"role": "user", "content": "<environment_context/>"}, {"role": "user", "content": parts}]
    message = policy.next_turn(_conversation(tools, messages), seed=0).message
    assert message["tool_calls"][0]["function"]["name"] == "Bash"
