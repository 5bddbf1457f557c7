"""A misspelt field is refused with a 422 naming it and, where one is close, the field meant: in a handler's
instance (an optional field's typo was accepted and ignored before: `"max_turn": 3` answered 202), and in
the request body itself. Real API over HTTP."""

from __future__ import annotations

import httpx
import pytest

MATH = {"handler": "math", "question": "What is 1 + 1?", "answer": "2"}


def refused(response: httpx.Response) -> list[tuple[list[str | int], str]]:
    assert response.status_code == 422, response.text
    return [(e["loc"], e["msg"]) for e in response.json()["detail"]]


@pytest.mark.parametrize(
    ("instance", "field", "meant"),
    [
        ({**MATH, "max_turn": 3}, "max_turn", "max_turns"),
        ({**MATH, "tool_timeout": 3}, "tool_timeout", "tool_timeout_s"),
        ({"handler": "noop", "run_secs": 1}, "run_secs", "run_s"),
        ({"handler": "noop", "rewrad": 1}, "rewrad", "reward"),
        ({**MATH, "colour": "blue"}, "colour", None),
    ],
)
def test_a_misspelt_instance_field_is_refused_naming_the_field_meant(
    api: httpx.Client, instance: dict[str, object], field: str, meant: str | None
) -> None:
    errors = refused(api.post("/process", json={"instance": instance, "wait": False}))
    assert [loc for loc, _ in errors] == [["body", "instance", field]]
    message = errors[0][1]
    assert field in message
    assert (f"did you mean {meant!r}" in message) if meant else ("did you mean" not in message), message


def test_a_misspelt_body_field_is_refused_naming_the_field_meant(api: httpx.Client) -> None:
    errors = refused(api.post("/process", json={"instance": MATH, "wiat": False}))
    assert errors == [(["body", "wiat"], "unknown field 'wiat'; did you mean 'wait'?")]
    errors = refused(api.post("/process", json={"instance": MATH, "sampling_params": {"temperatur": 0.5}}))
    assert len(errors) == 1 and "temperatur" in errors[0][1], errors


def test_a_swe_row_keeps_its_extra_columns_but_not_a_near_miss(api: httpx.Client) -> None:
    """The swe handler declares extra fields (SWE-bench rows carry columns the farm does not read)."""
    row = {
        "handler": "swe",
        "instance_id": "x-1",
        "repo": "o/x",
        "base_commit": "abc123",
        "FAIL_TO_PASS": ["t::a"],
        "problem_statement": "fix it",
        "repo_url": "https://example.invalid/x.git",
        "hints_text": "",
        "created_at": "2024-01-01",
    }
    accepted = api.post("/process", json={"instance": row, "wait": False})
    assert accepted.status_code in (202, 503), accepted.text  # 503: a stopped farm; never a 422
    errors = refused(api.post("/process", json={"instance": {**row, "max_turn": 3}, "wait": False}))
    assert len(errors) == 1 and "did you mean 'max_turns'" in errors[0][1], errors
