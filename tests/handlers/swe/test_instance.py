"""Validation of swe instances: SWE-bench's JSON-string test lists, repository sources, named errors."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from farm.handler.registry import get_handler
from handlers.host_files import PROJECT_DATA
from handlers.swe.instance import SweInstance, SweTask

BASE: dict[str, Any] = {
    "handler": "swe",
    "instance_id": "octo__demo-1",
    "repo": "octo/demo",
    "base_commit": "0123456789abcdef0123456789abcdef01234567",
    "problem_statement": "It breaks.",
    "FAIL_TO_PASS": ["tests/test_a.py::test_x"],
    "repo_path": f"{PROJECT_DATA}/swe/repos/demo.git",  # inside an allowed root (need not exist at submit)
}


def error_fields(data: dict[str, Any]) -> list[str | int]:
    """The fields the validation errors point at (a list item's error points into its list)."""
    with pytest.raises(ValidationError) as caught:
        get_handler("swe").validate(data)
    return [e["loc"][0] for e in caught.value.errors()]


def test_the_handler_is_registered_with_its_model() -> None:
    handler = get_handler("swe")
    assert handler.instance_model is SweInstance
    inst = handler.validate(BASE)
    assert isinstance(inst, SweInstance)
    assert inst.test_command == "python -m pytest" and inst.evaluator == "farm"
    assert inst.PASS_TO_PASS == [] and inst.test_patch == ""


test_ids = st.lists(
    st.text(st.characters(blacklist_categories=("Cs",)), min_size=1).filter(lambda s: s.strip()),
    max_size=8,
)


@given(f2p=test_ids.filter(bool), p2p=test_ids, as_json=st.booleans())
def test_test_lists_come_as_lists_or_json_strings(f2p: list[str], p2p: list[str], as_json: bool) -> None:
    encode = json.dumps if as_json else list
    inst = SweInstance.model_validate({**BASE, "FAIL_TO_PASS": encode(f2p), "PASS_TO_PASS": encode(p2p)})
    assert (f2p, p2p) == (inst.FAIL_TO_PASS, inst.PASS_TO_PASS)
    assert inst.test_ids == list(dict.fromkeys(f2p + p2p))


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"FAIL_TO_PASS": "not json"}, "FAIL_TO_PASS"),
        ({"FAIL_TO_PASS": '{"a": 1}'}, "FAIL_TO_PASS"),
        ({"FAIL_TO_PASS": "[]"}, "FAIL_TO_PASS"),
        ({"FAIL_TO_PASS": ["ok", " "]}, "FAIL_TO_PASS"),
        ({"PASS_TO_PASS": "[1, 2]"}, "PASS_TO_PASS"),
        ({"PASS_TO_PASS": 7}, "PASS_TO_PASS"),
        ({"base_commit": "main"}, "base_commit"),
        ({"base_commit": "--upload-pack=x"}, "base_commit"),
        ({"repo_path": None}, "repo_path"),
        ({"repo_path": "relative/path"}, "repo_path"),
        ({"repo_url": "https://example.org/octo/demo.git"}, "repo_path"),
        ({"repo_path": None, "repo_url": "-oProxyCommand=x"}, "repo_url"),
        ({"problem_statement": ""}, "problem_statement"),
        ({"max_turns": 0}, "max_turns"),
        ({"evaluator": "magic"}, "evaluator"),
        ({"instance_id": None}, "instance_id"),
    ],
)
def test_bad_fields_are_named(change: dict[str, Any], field: str) -> None:
    data = {k: v for k, v in {**BASE, **change}.items() if v is not None}
    assert field in error_fields(data)


def test_repo_url_alone_is_a_source() -> None:
    data = {k: v for k, v in BASE.items() if k != "repo_path"}
    for url in ("https://github.com/octo/demo.git", "git@github.com:octo/demo.git", "file:///srv/demo"):
        assert SweInstance.model_validate({**data, "repo_url": url}).repo_url == url


def test_extra_swe_bench_fields_pass_through_and_the_task_view_needs_no_prompt() -> None:
    inst = SweInstance.model_validate({**BASE, "version": "1.0", "hints_text": "", "patch": "diff"})
    assert inst.model_dump()["version"] == "1.0"
    task = SweTask.model_validate({k: v for k, v in BASE.items() if k != "problem_statement"})
    assert task.base_commit == BASE["base_commit"]
    assert SweInstance.model_validate({**BASE, "base_commit": "ABCDEF1"}).base_commit == "abcdef1"
