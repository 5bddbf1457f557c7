"""The model gateway facing a backend that breaks the chat protocol: a 502 naming the problem, never a
500, and nothing recorded in the session."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.api.backend_server import MisbehavingBackend

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
BROKEN = [
    {"choices": "lol"},
    {"choices": ["lol"]},
    {"choices": [{"message": "m", "token_ids": [1]}]},
    {"choices": [{"message": {"content": "x", "tool_calls": ["y"]}, "token_ids": [1]}]},
    {"choices": [{"message": {"content": "x"}, "token_ids": ["a"]}], "prompt_token_ids": [1]},
    {"choices": [{"message": {"content": "x"}, "token_ids": [1]}], "prompt_token_ids": [1], "usage": "u"},
    [1, 2],
    None,
]


@pytest.fixture
def session(api: httpx.Client) -> Iterator[tuple[MisbehavingBackend, str]]:
    with MisbehavingBackend() as backend:
        api.post("/clear_llm_server").raise_for_status()  # another test module may have left one
        api.post("/add_llm_server", json={"address": backend.url}).raise_for_status()
        try:
            yield backend, api.post("/gateway/sessions", json={}).raise_for_status().json()["session_id"]
        finally:
            api.post("/clear_llm_server")


@pytest.mark.parametrize("reply", BROKEN, ids=range(len(BROKEN)))
def test_a_reply_breaking_the_protocol_is_a_502(
    api: httpx.Client, session: tuple[MisbehavingBackend, str], reply: object
) -> None:
    backend, session_id = session
    backend.behaviour.reply = reply
    response = api.post(f"/gateway/sessions/{session_id}/v1/chat/completions", json=CHAT)
    assert response.status_code == 502, response.text
    assert "Traceback" not in response.text
    assert api.get(f"/gateway/sessions/{session_id}/completions").raise_for_status().json() == []
