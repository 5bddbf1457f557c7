"""With FARM_API_TOKEN set, the API's schema and doc pages need the token like every other route."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from farm.launcher import LocalFarm

DOCS = ["/openapi.json", "/docs", "/redoc", "/docs/oauth2-redirect"]


def test_docs_need_the_token_when_one_is_set(start_api: Callable[..., LocalFarm]) -> None:
    farm = start_api(FARM_API_TOKEN="s3cret-docs")
    with httpx.Client(base_url=farm.api_url, timeout=10) as http:
        for path in DOCS:
            refused = http.get(path)
            assert refused.status_code == 401, path
            assert "paths" not in refused.text
            assert http.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401, path
            assert http.get(path, headers={"Authorization": "Bearer s3cret-docs"}).status_code == 200, path
        assert http.get("/healthz").status_code == 200
        schema = http.get("/openapi.json", headers={"Authorization": "Bearer s3cret-docs"}).json()
        assert "/process" in schema["paths"] and "/openapi.json" not in schema["paths"]


def test_docs_are_open_without_a_token(api: httpx.Client) -> None:
    for path in DOCS:
        assert api.get(path).status_code == 200, path
    assert "/openapi.json" in api.get("/docs").text
