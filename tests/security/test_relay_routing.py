"""The harness relay and the API agree on every request: a request target the relay lets through reaches,
in the real API (uvicorn's parser, Starlette's router), exactly the route the relay judged; any other
shape is refused at the relay. Attacks are sent from inside a real sandbox through the real relay to the
real API process, with FARM_API_TOKEN unset (the default), where a session's management routes answer
anyone who reaches them."""

from __future__ import annotations

import json
import shlex
import socket
from collections.abc import Iterator

import httpx
import pytest

from containers.local import LocalRuntime
from containers.sandbox import Sandbox
from containers.spec import SandboxSpec
from farm.launcher import LocalFarm
from handlers.harness.gateway_access import RELAY_PORT, session_access

# {sp} is the session's path, /gateway/sessions/<id>. Each shape aims at a management route of the session
# (or the farm's API) while looking, to some parse, like one of the session's model routes.
ATTACKS = [
    pytest.param("POST", "{sp}/reward#x", id="fragment"),
    pytest.param("POST", "{sp}/end#/v1/messages", id="fragment-path"),
    pytest.param("POST", "{sp}/end#?", id="fragment-query"),
    pytest.param("GET", "{sp}/completions#", id="fragment-completions"),
    pytest.param("POST", "{sp}/reward;x", id="params"),
    pytest.param("POST", "{sp}/v1/..%2Freward", id="encoded-slash-dots"),
    pytest.param("POST", "{sp}%2Freward", id="encoded-slash"),
    pytest.param("POST", "{sp}/%2e%2e/{sid}/end", id="encoded-dot-segment"),
    pytest.param("POST", "{sp}/v1/../end", id="dot-segment"),
    pytest.param("POST", "{sp}/./end", id="single-dot"),
    pytest.param("POST", "{sp}//end", id="double-slash"),
    pytest.param("POST", "/{sp}/v1/messages", id="leading-double-slash"),
    pytest.param("POST", "{sp}/v1\\..\\end", id="backslash"),
    pytest.param("POST", "http://127.0.0.1{sp}/end", id="absolute-form"),
    pytest.param("POST", "http://127.0.0.1/gateway/sessions/other/v1/messages?{sp}/v1", id="absolute-query"),
    pytest.param("POST", "{sp}/end?/v1/messages", id="query-trick"),
    pytest.param("POST", "{sp}/v1/messages\t/../../end", id="tab"),
    pytest.param("POST", "{sp}/v1/m\u00e9ssages", id="unicode"),
    pytest.param("POST", "{sp}/v1/" + "a" * 10000, id="overlong"),
    pytest.param("POST", "{sp}/v1/" + "a" * 70000, id="head-too-large"),
    pytest.param("POST", "*", id="asterisk-form"),
]
# Shapes a harness really sends (the gateway's routes): these must still pass.
MODEL_CALLS = [
    pytest.param("POST", "{sp}/v1/chat/completions", id="openai-chat"),
    pytest.param("POST", "{sp}/v1/messages?beta=true", id="anthropic"),
    pytest.param("POST", "{sp}/v1beta/models/m:streamGenerateContent?alt=sse", id="google"),
    pytest.param("GET", "{sp}/v1/models", id="models"),
]

SEND = """
import json, socket, sys
answers = []
for request in json.load(sys.stdin):
    s = socket.create_connection(("127.0.0.1", PORT), 10)
    out = b""
    try:
        s.sendall(bytes.fromhex(request))
        s.settimeout(20)
        while chunk := s.recv(65536):
            out += chunk
    except OSError:
        pass
    s.close()
    answers.append(out.decode("latin-1"))
print(json.dumps(answers))
"""


def request_bytes(method: str, target: str, body: bytes = b'{"reward": 1.0}') -> bytes:
    head = f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
    return head.encode("utf-8") + f"content-length: {len(body)}\r\n\r\n".encode() + body


@pytest.fixture(scope="module")
def farm_api(api_farm: LocalFarm) -> LocalFarm:
    """The real API process (uvicorn as `farm up` starts it), no token: the default (the session's own,
    tests/conftest.py)."""
    return api_farm


@pytest.fixture(scope="module")
def relayed(runtime: LocalRuntime) -> Iterator[Sandbox]:
    with runtime.start(SandboxSpec(relay_port=RELAY_PORT)) as sandbox:
        yield sandbox


@pytest.fixture
def session(farm_api: LocalFarm) -> Iterator[tuple[httpx.Client, str, str]]:
    with httpx.Client(base_url=farm_api.api_url, timeout=30) as api:
        created = api.post("/gateway/sessions", json={}).raise_for_status().json()
        yield api, created["session_id"], created["base_url"]


def through_relay(sandbox: Sandbox, base_url: str, *requests: bytes) -> list[str]:
    """Each request on its own connection to the sandbox's relay port, from inside the sandbox."""
    script = "python3 -c " + shlex.quote(SEND.replace("PORT", str(RELAY_PORT)))
    with session_access(sandbox, base_url):
        result = sandbox.exec(script, stdin=json.dumps([r.hex() for r in requests]), timeout=120)
    answers: list[str] = json.loads(result.stdout)
    return answers


def direct(api_url: str, request: bytes) -> str:
    host, port = api_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), 10) as conn:
        conn.sendall(request.replace(b"\r\n", b"\r\nconnection: close\r\n", 1))
        conn.settimeout(20)
        out = b""
        while chunk := conn.recv(65536):
            out += chunk
    return out.decode("latin-1")


def status(answer: str) -> int:
    return int(answer.split(" ", 2)[1]) if answer.startswith("HTTP/1.") else 0


def test_straight_to_the_api_a_fragment_reaches_the_sessions_management(
    session: tuple[httpx.Client, str, str], farm_api: LocalFarm
) -> None:
    """Why the relay must decide as the server parses: uvicorn drops the fragment, so `/end#...` ends the
    session and `/reward#x` reaches the reward route, although the text after the session id is neither
    `end` nor `reward` to a plain split."""
    api, sid, _ = session
    sp = f"/gateway/sessions/{sid}"
    rewarded = direct(farm_api.api_url, request_bytes("POST", f"{sp}/reward#x"))
    assert "no completion to reward" in rewarded  # the reward route answered
    assert status(direct(farm_api.api_url, request_bytes("POST", f"{sp}/end#/v1/messages"))) == 200
    assert api.get(sp).json()["state"] == "ended"


def test_no_shape_reaches_anything_but_the_sessions_model_routes(
    relayed: Sandbox, session: tuple[httpx.Client, str, str]
) -> None:
    """All the shapes on one session (one sandbox command): any that got through would have ended the
    session, or reached a model route and left a failed call (no backend is registered here)."""
    api, sid, base_url = session
    sp = f"/gateway/sessions/{sid}"
    shapes = [(p.id, *p.values) for p in ATTACKS]
    requests = [request_bytes(method, target.format(sp=sp, sid=sid)) for _, method, target in shapes]
    answers = through_relay(relayed, base_url, *requests)
    for (name, _, target), answer in zip(shapes, answers, strict=True):
        # the relay's own refusal, nothing carried (past 64 KiB of head the answer may be lost to the reset
        # of a connection closed with the rest of the head unread)
        expected = (0, 431) if len(target) > 65536 else (403,)
        assert status(answer) in expected, (name, answer[:300])
        assert "server: uvicorn" not in answer.partition("\r\n\r\n")[0], name
    info = api.get(sp).json()
    assert info["state"] == "open" and info["failed_call_count"] == 0, info


def test_a_pipelined_second_request_never_reaches_the_api(
    relayed: Sandbox, session: tuple[httpx.Client, str, str]
) -> None:
    api, sid, base_url = session
    sp = f"/gateway/sessions/{sid}"
    first = request_bytes("POST", f"{sp}/v1/chat/completions", b"{}")
    (answer,) = through_relay(relayed, base_url, first + request_bytes("POST", f"{sp}/end", b""))
    assert answer.count("HTTP/1.1 ") == 1, answer
    assert api.get(sp).json()["state"] == "open"


def test_the_sessions_model_routes_still_pass(
    relayed: Sandbox, session: tuple[httpx.Client, str, str]
) -> None:
    """The gateway answers them (no backend is registered here: a provider-shaped error, never the relay's
    403); the answer is the gateway's own JSON, so the request reached the route the relay judged."""
    api, sid, base_url = session
    sp = f"/gateway/sessions/{sid}"
    calls = [(p.id, *p.values) for p in MODEL_CALLS]
    requests = [request_bytes(method, target.format(sp=sp), b"{}") for _, method, target in calls]
    for (name, _, _), answer in zip(calls, through_relay(relayed, base_url, *requests), strict=True):
        assert status(answer) not in (0, 403), (name, answer[:300])
        assert "server: uvicorn" in answer.partition("\r\n\r\n")[0], name
        assert json.loads(answer.partition("\r\n\r\n")[2]), name
    assert api.get(sp).json()["state"] == "open"
