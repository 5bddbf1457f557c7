"""Fixtures for the model side: reference LLM servers started as real subprocesses on free ports."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from farm.chat.tokenizer import ChatTokenizer
from tests.waiting import wait_until

SCRIPTS = [
    {
        "match": "How many apples",
        "steps": [
            {"say": "Let me count them.", "tool": "python", "arguments": {"code": "print(3 + 4)"}},
            {"say": "There are {{ tool_output }} apples, so the answer is \\boxed{ {{- tool_output -}} }."},
        ],
        "wrong_steps": [
            {"say": "Let me count them.", "tool": "python", "arguments": {"code": "print(3 + 5)"}},
            {"say": "There are {{ tool_output }} apples, so the answer is \\boxed{ {{- tool_output -}} }."},
        ],
    }
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    def __init__(self, args: list[str]) -> None:
        self.port = free_port()
        self.root = f"http://127.0.0.1:{self.port}"
        self.address = f"{self.root}/v1"
        cmd = [sys.executable, "-m", "farm.llm", "serve", "--port", str(self.port), *args]
        env = {**os.environ, "TRANSFORMERS_VERBOSITY": "error"}
        # To a file, read only if it dies while starting: a pipe nobody reads blocks the server once full.
        self.log = Path(tempfile.mkdtemp(prefix="farm-llm-server-")) / "server.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)

    def wait_ready(self, timeout: float = 60.0) -> ServerProcess:
        wait_until(self._healthy, timeout, what="the reference LLM server to be healthy", interval_s=0.1,
                   ignore=(httpx.HTTPError,))  # fmt: skip
        return self

    def _healthy(self) -> bool:
        if self.proc.poll() is not None:
            output = self.log.read_text(errors="replace")
            raise RuntimeError(f"server exited with {self.proc.returncode}:\n{output}")
        return httpx.get(f"{self.root}/health", timeout=1.0).status_code == 200

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="session")
def tokenizer() -> ChatTokenizer:
    return ChatTokenizer.load()


@pytest.fixture(scope="session")
def script_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("scripts") / "apples.jsonl"
    path.write_text("".join(json.dumps(s) + "\n" for s in SCRIPTS))
    return path


SCRIPTED_ARGS = ["--policy", "scripted", "--accuracy", "0.5", "--max-model-len", "1024"]
TINY_ARGS = ["--policy", "tiny", "--seed", "7", "--max-model-len", "512"]


@pytest.fixture(scope="session", autouse=True)
def _servers(request: pytest.FixtureRequest, script_file: Path) -> Iterator[dict[str, ServerProcess]]:
    """Start the servers the selected tests need right away, so their start-up overlaps other tests."""
    wanted = {name for item in request.session.items for name in getattr(item, "fixturenames", ())}
    servers: dict[str, ServerProcess] = {}
    if "scripted_server" in wanted:
        servers["scripted"] = ServerProcess([*SCRIPTED_ARGS, "--scripts", str(script_file)])
    if "tiny_server" in wanted and importlib.util.find_spec("torch") is not None:
        servers["tiny"] = ServerProcess(TINY_ARGS)
    yield servers
    for server in servers.values():
        server.stop()


@pytest.fixture(scope="session")
def scripted_server(_servers: dict[str, ServerProcess]) -> ServerProcess:
    return _servers["scripted"].wait_ready()


@pytest.fixture(scope="session")
def tiny_server(_servers: dict[str, ServerProcess]) -> ServerProcess:
    pytest.importorskip("torch")
    return _servers["tiny"].wait_ready(timeout=120)
