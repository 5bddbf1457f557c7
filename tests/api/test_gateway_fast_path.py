"""The model calls served ahead of FastAPI's routing (farm/gateway/fast_path.py) still sit inside the API's
own middleware: an oversized body is a 413, a non-finite number a 422, and routing matches the routes."""

from __future__ import annotations

import httpx
import pytest

from farm.gateway.app import model_route


def _scope(path: str, method: str = "POST", root_path: str = "") -> dict[str, object]:
    return {"type": "http", "method": method, "path": path, "root_path": root_path}


@pytest.mark.parametrize(
    ("path", "route"),
    [
        ("/gateway/sessions/s1/v1/chat/completions", "v1/chat/completions"),
        ("/gateway/sessions/s1/v1/responses", "v1/responses"),
        ("/gateway/sessions/s1/v1/messages", "v1/messages"),
        (
            "/gateway/sessions/s1/v1beta/models/gemini:streamGenerateContent",
            "v1beta/models/gemini:streamGenerateContent",
        ),
        ("/gateway/sessions/s1/v1/models/gemini:generateContent", "v1/models/gemini:generateContent"),
    ],
)
def test_model_routes_are_served_by_the_fast_path(path: str, route: str) -> None:
    assert model_route(_scope(path)) == ("s1", route)
    assert model_route(_scope("/farm" + path, root_path="/farm")) == ("s1", route)


@pytest.mark.parametrize(
    "path",
    [
        "/gateway/sessions/s1/v1/messages/count_tokens",  # FastAPI's route
        "/gateway/sessions/s1/chat/completions",  # provider detection
        "/gateway/sessions",
        "/gateway/sessions/s1/v1/models",
        # an attacker's paths to the bearer-token routes: never served by the fast path, whose handler
        # knows no token (they reach FastAPI and its require_token dependency)
        "/gateway/sessions/s1/export",
        "/gateway/sessions/s1/reward",
        "/gateway/sessions/s1/end",
        "/gateway/sessions/s1/v1/models/../../export",
        "/gateway/sessions/s1/v1/chat/completions/../../export",
        "/gateway/sessions/s1/v1/models/x/../../../end",
        "/gateway/sessions/a/b/v1/chat/completions",
    ],
)
def test_other_paths_go_to_fastapi(path: str) -> None:
    assert model_route(_scope(path)) is None
    assert model_route(_scope("/gateway/sessions/s1/v1/chat/completions", method="GET")) is None


@pytest.mark.parametrize(
    "path",
    [
        "/gateway/sessions/s1/v1/chat/completions",
        "/gateway/sessions/s1/v1beta/models/gemini:streamGenerateContent",
        "/gateway/sessions/s1/v1/messages/count_tokens",
        "/gateway/sessions/s1/export",
        "/gateway/sessions/s1/v1/models/../../export",
        "/gateway/sessions/s1/chat/completions",
        "/gateway/sessions/s1",
        "/process",
    ],
)
def test_the_fast_path_serves_what_fastapi_routes_to_a_model_call(path: str) -> None:
    """No route list of its own: it serves a path exactly when the gateway router would give it to one of
    the model-call endpoints (the first route matching path and method, as Starlette routes)."""
    from starlette.routing import Match

    from farm.gateway.app import _SERVED_FAST, router

    scope = _scope(path)
    routed = next((r for r in router.routes if r.matches(scope)[0] is Match.FULL), None)
    to_model_call = routed is not None and getattr(routed, "endpoint", None) in _SERVED_FAST
    assert (model_route(scope) is not None) is to_model_call
    assert len(_SERVED_FAST) == 4  # chat completions, responses, messages, Google generate


def test_each_model_call_route_has_one_provider() -> None:
    """The routes and their providers come from one list: every route served as a model call has its
    provider, and a path that is none of them is an error rather than a Google call."""
    from farm.gateway.app import _SERVED_FAST, _route_provider, router

    served = [r for r in router.routes if getattr(r, "endpoint", None) in _SERVED_FAST]
    after_session = [r.path.split("{session_id}/")[1] for r in served]  # type: ignore[attr-defined]
    routes = [route.replace("{model_action}", "m:generateContent") for route in after_session]
    assert {route: _route_provider(route) for route in routes} == {
        "v1/chat/completions": "openai_chat",
        "v1/responses": "openai_responses",
        "v1/messages": "anthropic",
        "v1beta/models/m:generateContent": "google",
        "v1/models/m:generateContent": "google",
    }
    with pytest.raises(LookupError):
        _route_provider("v1/chat/completion")


def test_the_api_middleware_still_wraps_model_calls(api: httpx.Client) -> None:
    session_id = api.post("/gateway/sessions", json={}).raise_for_status().json()["session_id"]
    url = f"/gateway/sessions/{session_id}/v1/chat/completions"
    raw = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": NaN}'
    refused = api.post(url, content=raw, headers={"content-type": "application/json"})
    assert refused.status_code == 422, refused.text
    huge = api.post(url, content=b"x" * (8 * 1024 * 1024 + 1), headers={"content-type": "application/json"})
    assert huge.status_code == 413, huge.text
    unknown = api.post("/gateway/sessions/never-issued/v1/chat/completions", json={"messages": []})
    assert unknown.status_code == 404
    assert unknown.json()["error"]["type"]  # OpenAI-shaped, from the gateway itself
