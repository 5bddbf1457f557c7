"""Error answers, declared in the OpenAPI of the routes that give them."""

from __future__ import annotations

from typing import Any

_DESCRIPTIONS = {
    400: "The body could not be read (not UTF-8, not JSON)",
    401: "FARM_API_TOKEN is set and the bearer token is missing or wrong",
    404: "No such job, task or session",
    409: "The session has ended, or has no completion to reward",
    413: "The body is larger than FARM_MAX_REQUEST_BYTES",
    503: "The farm is stopped (POST /start to accept work again)",
}


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: {"description": _DESCRIPTIONS[code]} for code in codes}
