"""The shipped sample suite agrees with itself: problems.jsonl and the scripts are what build_suite makes,
every problem has a script the scripted policy finds from the handler's real prompt, every reference
solution passes its hidden tests and every wrong one fails them."""

from __future__ import annotations

import json

import pytest

from containers.tools.registry import openai_tools
from farm.chat.tokenizer import ChatTokenizer
from farm.llm.chatml import parse_chatml
from farm.llm.policies.scripted import ScriptedPolicy
from farm.llm.policies.scripts import ScriptBook, handler_script_paths, load_scripts
from handlers.code import CodeInstance
from handlers.code.build_suite import (
    PROBLEMS_FILE,
    SCRIPTS_FILE,
    consistency_errors,
    instance,
    run_tests_locally,
    script,
)
from handlers.code.handler import finish_tool
from handlers.code.prompting import SOLUTION_PATH, SYSTEM_PROMPT, user_message
from handlers.code.suite import PROBLEMS, Problem

IDS = [p.slug for p in PROBLEMS]


def test_at_least_twenty_problems_with_several_asserts() -> None:
    assert len(PROBLEMS) >= 20
    assert {p.kind for p in PROBLEMS} == {"write", "fix", "complete"}
    for p in PROBLEMS:
        assert p.hidden_tests.count("assert") >= 4, p.slug


def test_the_definitions_are_consistent() -> None:
    assert consistency_errors(PROBLEMS) == []


def test_shipped_files_are_what_build_suite_writes() -> None:
    assert [json.loads(x) for x in PROBLEMS_FILE.read_text().splitlines()] == [instance(p) for p in PROBLEMS]
    assert [json.loads(x) for x in SCRIPTS_FILE.read_text().splitlines()] == [script(p) for p in PROBLEMS]


@pytest.mark.parametrize("problem", PROBLEMS, ids=IDS)
def test_reference_passes_and_wrong_fails(problem: Problem) -> None:
    good = run_tests_locally(problem.hidden_tests, problem.solution)
    assert good.reward == 1.0, good.failure_log()
    bad = run_tests_locally(problem.hidden_tests, problem.wrong)
    assert bad.reward == 0.0 and bad.finished
    assert bad.passed >= 1 or problem.slug == "run-length-encode"  # subtly wrong: most cases still pass


@pytest.fixture(scope="module")
def book() -> ScriptBook:
    paths = handler_script_paths()
    assert SCRIPTS_FILE.resolve() in [p.resolve() for p in paths]  # auto-loaded like every handler's
    return ScriptBook(load_scripts(paths))


def _edited_text(message: dict, before: str | None) -> str | None:
    """solution.py after the editor call in `message` (None when the turn does not write it)."""
    calls = message.get("tool_calls") or []
    if not calls or calls[0]["function"]["name"] != "editor":
        return before
    args = calls[0]["function"]["arguments"]
    assert args["path"] == SOLUTION_PATH
    if args["command"] == "create":
        return args["file_text"]
    if args["command"] == "str_replace":
        assert before is not None and before.count(args["old_str"]) == 1
        return before.replace(args["old_str"], args["new_str"])
    return before


@pytest.mark.parametrize("problem", PROBLEMS, ids=IDS)
def test_scripted_policy_walks_both_paths_from_the_real_prompt(book: ScriptBook, problem: Problem) -> None:
    """Replays the policy turn by turn on the handler's own prompt (tool results stubbed): an always-right
    policy ends with the reference in solution.py, an always-wrong one with the wrong solution."""
    tokenizer = ChatTokenizer.load()
    inst = CodeInstance.model_validate({"handler": "code", **instance(problem)})
    tools = [*openai_tools(["editor", "bash"]), finish_tool().schema]
    expected = {True: problem.solution, False: problem.wrong}
    for succeed in (True, False):
        policy = ScriptedPolicy(tokenizer, book, accuracy=1.0 if succeed else 0.0)
        messages: list[dict] = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": user_message(inst)},
        ]
        text = inst.starter_code
        for turn in range(8):
            ids = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True)
            message = policy.next_turn(parse_chatml(tokenizer.decode(ids)), turn).message
            text = _edited_text(message, text)
            messages.append({**message, "content": message.get("content") or ""})
            calls = message.get("tool_calls") or []
            if not calls or calls[0]["function"]["name"] == "finish":
                break
            messages.append({"role": "tool", "name": calls[0]["function"]["name"], "content": "ok"})
        assert text == expected[succeed], (problem.slug, succeed)
        names = [c["function"]["name"] for m in messages for c in m.get("tool_calls") or []]
        assert "bash" in names and names[0] == "editor", names
