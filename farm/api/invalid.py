"""The API's 422: FastAPI's own answer (`{"detail": [errors]}`), with every unknown body field named and,
when a known one is close, the field meant (farm/models/unknown_fields.py)."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from farm.models.unknown_fields import explain_unknown

PYDANTIC_EXTRA = "Extra inputs are not permitted"


def body_model(request: Request) -> Any:
    """The annotation of the route's body parameter (None for a route without a body)."""
    field = getattr(request.scope.get("route"), "body_field", None)
    return getattr(getattr(field, "field_info", None), "annotation", None)


async def invalid_request(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors: list[dict[str, Any]] = list(exc.errors())
    model = body_model(request)
    if model is not None:
        # only pydantic's own message: one already explained (a handler instance's) is kept as it is
        plain = [e for e in errors if e.get("msg") == PYDANTIC_EXTRA]
        explained = iter(explain_unknown(plain, model, skip=1))
        errors = [next(explained) if e.get("msg") == PYDANTIC_EXTRA else e for e in errors]
    return JSONResponse({"detail": jsonable_encoder(errors)}, status_code=422)
