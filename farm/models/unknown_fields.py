"""A misspelt field is refused naming it and, when a known field is close, the field meant.

Pydantic says `Extra inputs are not permitted` at the unknown key's location; this rewrites that message
into `unknown field 'max_turn'; did you mean 'max_turns'?`, using the fields of the model that refused
it (found by walking the model's annotations along the error's location).
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel

CLOSE_ENOUGH = 0.75
"""difflib's ratio above which a known field is offered (max_turn/max_turns 0.94, temperatur 0.95)."""


def _arms(annotation: Any) -> list[Any]:
    """The types an annotation may hold: each arm of a union, the argument of Annotated/Optional."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _arms(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [arm for arg in typing.get_args(annotation) for arm in _arms(arg)]
    return [annotation]


def _models(annotation: Any) -> list[type[BaseModel]]:
    return [arm for arm in _arms(annotation) if isinstance(arm, type) and issubclass(arm, BaseModel)]


def _step(annotation: Any, part: str | int) -> list[Any]:
    """What sits at `part` inside a value of `annotation`: a model's field, a list's item, a dict's value."""
    found: list[Any] = []
    for arm in _arms(annotation):
        if isinstance(arm, type) and issubclass(arm, BaseModel):
            for name, field in arm.model_fields.items():
                if part in (name, field.alias, field.validation_alias):
                    found.append(field.annotation)
        elif typing.get_origin(arm) in (list, tuple, set, frozenset, Sequence) and isinstance(part, int):
            found.extend(typing.get_args(arm)[:1])
        elif typing.get_origin(arm) is dict and typing.get_args(arm):
            found.append(typing.get_args(arm)[-1])
    return found


def known_fields(model: Any, path: Sequence[str | int]) -> list[str]:
    """The field names of the model found at `path` inside `model` (empty when the walk loses its way)."""
    current = [model]
    for part in path:
        current = [found for annotation in current for found in _step(annotation, part)]
    names: list[str] = []
    for found in current:
        for cls in _models(found):
            names += [field.alias or name for name, field in cls.model_fields.items()]
    return list(dict.fromkeys(names))


def declared_names(model: type[BaseModel]) -> set[str]:
    """Every key `model` reads: field names, aliases and each choice of a validation alias."""
    names: set[str] = set()
    for name, field in model.model_fields.items():
        names.add(name)
        if field.alias:
            names.add(field.alias)
        alias = field.validation_alias
        if isinstance(alias, str):
            names.add(alias)
        elif alias is not None and hasattr(alias, "choices"):
            names.update(c for c in alias.choices if isinstance(c, str))
    return names


NEAR_MISS = 0.85
"""Where extra fields are allowed, the ratio above which one is taken for a typo of a declared field
(max_turn/max_turns 0.94; a carried eval_timeout_s beside timeout_s is 0.78, and is no typo)."""


def closest(name: str, candidates: Iterable[str], cutoff: float = CLOSE_ENOUGH) -> str | None:
    matches = difflib.get_close_matches(name, list(candidates), n=1, cutoff=cutoff)
    return matches[0] if matches else None


def unknown_field_message(name: str, candidates: Iterable[str]) -> str:
    meant = closest(name, candidates)
    return f"unknown field {name!r}" + (f"; did you mean {meant!r}?" if meant else "")


def explain_unknown(errors: Iterable[dict[str, Any]], model: Any, skip: int = 0) -> list[dict[str, Any]]:
    """`errors` (pydantic's, as dicts) with each `extra_forbidden` message naming the field and the
    field meant. `skip`: how many leading location parts are not the model's (FastAPI's `body`)."""
    explained = []
    for error in errors:
        loc = tuple(error.get("loc", ()))
        if error.get("type") == "extra_forbidden" and len(loc) > skip and isinstance(loc[-1], str):
            candidates = known_fields(model, loc[skip:-1])
            error = {**error, "msg": unknown_field_message(loc[-1], candidates)}
        explained.append(error)
    return explained
