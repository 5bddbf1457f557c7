"""What a `code` job is asked: the instance fields (documented in handlers/code/handler.py)."""

from __future__ import annotations

import keyword

from pydantic import AliasChoices, Field, field_validator

from farm.agent.loop import AgentLimits
from farm.handler.protocol import HandlerInstance
from handlers.code.grading import list_tests


class CodeInstance(HandlerInstance, AgentLimits):
    prompt: str = Field(min_length=1, validation_alias=AliasChoices("prompt", "instruction"))
    entry_point: str | None = None
    hidden_tests: str = Field(min_length=1)
    public_tests: str | None = None
    starter_code: str | None = None
    max_turns: int = Field(10, ge=1, le=128)
    max_context_tokens: int = Field(8192, ge=256)
    tool_timeout_s: float = Field(30.0, gt=0, le=600)
    test_timeout_s: float = Field(30.0, gt=0, le=600)

    @field_validator("entry_point")
    @classmethod
    def _identifier(cls, value: str | None) -> str | None:
        if value is not None and (not value.isidentifier() or keyword.iskeyword(value)):
            raise ValueError(f"{value!r} is not a Python identifier")
        return value

    @field_validator("hidden_tests")
    @classmethod
    def _has_tests(cls, value: str) -> str:
        try:
            names = list_tests(value)
        except SyntaxError as exc:
            raise ValueError(f"not valid Python: {exc.msg} (line {exc.lineno})") from None
        if not names:
            raise ValueError("defines no top-level test function (def test...)")
        return value

    @field_validator("public_tests")
    @classmethod
    def _parses(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                list_tests(value)
            except SyntaxError as exc:
                raise ValueError(f"not valid Python: {exc.msg} (line {exc.lineno})") from None
        return value
