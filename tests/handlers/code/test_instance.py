"""The code instance model and what the policy is shown of it."""

from __future__ import annotations

import json
import keyword
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from farm.handler.registry import get_handler
from handlers.code import CodeInstance
from handlers.code.prompting import PUBLIC_TESTS_FILE, starter_files, user_message

SUITE = Path(__file__).resolve().parents[3] / "handlers" / "code" / "problems.jsonl"
TESTS = "from solution import f\n\n\ndef test_f():\n    assert f() == 1\n"
BASE = {"handler": "code", "prompt": "Write f() returning 1.", "hidden_tests": TESTS}


def error_fields(data: dict) -> list[tuple]:
    with pytest.raises(ValidationError) as caught:
        CodeInstance.model_validate(data)
    return [e["loc"] for e in caught.value.errors()]


def test_registered_and_defaults() -> None:
    handler = get_handler("code")
    inst = handler.validate(BASE)
    assert isinstance(inst, CodeInstance)
    assert (inst.max_turns, inst.max_context_tokens, inst.test_timeout_s) == (10, 8192, 30.0)
    assert inst.entry_point is None and inst.public_tests is None and inst.starter_code is None


def test_every_suite_problem_is_a_valid_instance() -> None:
    lines = SUITE.read_text().splitlines()
    assert len(lines) >= 20
    for line in lines:
        CodeInstance.model_validate({"handler": "code", **json.loads(line)})


def test_instruction_is_accepted_for_prompt() -> None:
    data = {k: v for k, v in BASE.items() if k != "prompt"}
    assert CodeInstance.model_validate({**data, "instruction": "Do it."}).prompt == "Do it."


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"prompt": None}, "prompt"),
        ({"prompt": ""}, "prompt"),
        ({"hidden_tests": None}, "hidden_tests"),
        ({"hidden_tests": "x = 1\n"}, "hidden_tests"),
        ({"hidden_tests": "def test_a(:\n"}, "hidden_tests"),
        ({"hidden_tests": "class TestX:\n    def test_a(self):\n        pass\n"}, "hidden_tests"),
        ({"hidden_tests": ["not", "text"]}, "hidden_tests"),
        ({"public_tests": "def broken(:\n"}, "public_tests"),
        ({"entry_point": "two words"}, "entry_point"),
        ({"entry_point": "class"}, "entry_point"),
        ({"max_turns": 0}, "max_turns"),
        ({"max_turns": "many"}, "max_turns"),
        ({"max_context_tokens": 10}, "max_context_tokens"),
        ({"tool_timeout_s": -1}, "tool_timeout_s"),
        ({"test_timeout_s": 0}, "test_timeout_s"),
        ({"test_timeout_s": 10_000}, "test_timeout_s"),
    ],
)
def test_bad_fields_are_named(change: dict, field: str) -> None:
    data = {k: v for k, v in {**BASE, **change}.items() if v is not None}
    assert error_fields(data) == [(field,)]


@given(st.text(min_size=1, max_size=12))
def test_entry_point_must_be_an_identifier(name: str) -> None:
    valid = name.isidentifier() and not keyword.iskeyword(name)
    try:
        CodeInstance.model_validate({**BASE, "entry_point": name})
    except ValidationError as exc:
        assert not valid
        assert [e["loc"] for e in exc.errors()] == [("entry_point",)]
    else:
        assert valid


def test_user_message_shows_prompt_first_and_never_the_hidden_tests() -> None:
    hidden = "from solution import f\n\n\ndef test_secret_case():\n    assert f() == 1\n"
    public = "from solution import f\n\n\ndef test_shown():\n    assert f() == 1\n"
    inst = CodeInstance.model_validate(
        {
            **BASE,
            "hidden_tests": hidden,
            "public_tests": public,
            "entry_point": "f",
            "starter_code": "# todo\n",
        }
    )
    text = user_message(inst)
    assert text.startswith(inst.prompt)
    assert "`f`" in text and "/workspace/solution.py" in text and "starter code" in text
    assert "test_shown" in text and "test_secret_case" not in text
    files = starter_files(inst)
    assert files["solution.py"] == "# todo\n"
    assert (
        files[PUBLIC_TESTS_FILE].startswith(public.rstrip())
        and 'if __name__ == "__main__"' in files[PUBLIC_TESTS_FILE]
    )
    assert "test_secret_case" not in json.dumps(files)


def test_no_starter_files_by_default() -> None:
    assert starter_files(CodeInstance.model_validate(BASE)) == {}
