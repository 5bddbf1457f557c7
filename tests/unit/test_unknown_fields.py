"""The field meant, found along an error's location (farm/models/unknown_fields.py)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from farm.models.unknown_fields import closest, explain_unknown, known_fields


class Inner(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_tokens: int = 1


class Outer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    inner: Inner | None = None
    items: list[Inner] = Field(default_factory=list)
    named: dict[str, Inner] = Field(default_factory=dict)


def test_fields_are_found_through_optionals_lists_and_dicts() -> None:
    assert known_fields(Outer, []) == ["inner", "items", "named"]
    assert known_fields(Outer, ["inner"]) == ["max_tokens"]
    assert known_fields(Outer, ["items", 3]) == ["max_tokens"]
    assert known_fields(Outer, ["named", "a"]) == ["max_tokens"]
    assert known_fields(Outer, ["nowhere"]) == []


def test_each_unknown_field_names_the_one_meant_when_close() -> None:
    raw = {"inner": {"max_token": 2}, "items": [{"maxtokens": 1}], "zzz": 1}
    try:
        Outer.model_validate(raw)
    except ValidationError as exc:
        errors = explain_unknown([dict(e) for e in exc.errors()], Outer)
    messages = {tuple(e["loc"]): e["msg"] for e in errors}
    assert messages == {
        ("inner", "max_token"): "unknown field 'max_token'; did you mean 'max_tokens'?",
        ("items", 0, "maxtokens"): "unknown field 'maxtokens'; did you mean 'max_tokens'?",
        ("zzz",): "unknown field 'zzz'",
    }


def test_only_close_names_are_offered() -> None:
    assert closest("max_turn", ["max_turns", "max_context_tokens"]) == "max_turns"
    assert closest("hints_text", ["problem_statement", "test_patch"]) is None
