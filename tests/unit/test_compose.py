"""compose/docker-compose.yml is valid for a compose client (no engine needed for `config`)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

COMPOSE = Path(__file__).parents[2] / "compose" / "docker-compose.yml"


def _client() -> list[str] | None:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True)
        if probe.returncode == 0:
            return ["docker", "compose"]
    return None


def test_compose_file_validates() -> None:
    client = _client()
    if client is None:
        pytest.skip("no compose client here (Debian package docker-compose, or the docker compose plugin)")
    # required: the API and Flower are published (tests below)
    env = {**os.environ, "FARM_API_TOKEN": "a-token", "FLOWER_BASIC_AUTH": "admin:a-password"}
    result = subprocess.run(
        [*client, "-f", str(COMPOSE), "config", "--quiet"], capture_output=True, text=True, env=env
    )
    assert result.returncode == 0, result.stderr


def test_compose_requires_an_api_token() -> None:
    """The API is published on every interface: without FARM_API_TOKEN the file does not validate, with a
    message naming the setting; the API and the workers get it."""
    client = _client()
    if client is None:
        pytest.skip("no compose client here (Debian package docker-compose, or the docker compose plugin)")
    env = {k: v for k, v in os.environ.items() if k not in ("FARM_API_TOKEN", "FLOWER_BASIC_AUTH")}
    env["FLOWER_BASIC_AUTH"] = "admin:a-password"
    command = [*client, "-f", str(COMPOSE), "config"]
    refused = subprocess.run(command, capture_output=True, text=True, env=env, cwd=COMPOSE.parent)
    assert refused.returncode != 0 and "FARM_API_TOKEN" in refused.stderr, refused.stderr
    given = subprocess.run(
        command, capture_output=True, text=True, env={**env, "FARM_API_TOKEN": "t0k3n"}, cwd=COMPOSE.parent
    )
    assert given.returncode == 0, given.stderr
    import yaml

    services = yaml.safe_load(given.stdout)["services"]
    for name in ("api", "worker-init", "worker-run", "worker-eval", "register-backend"):
        assert services[name]["environment"]["FARM_API_TOKEN"] == "t0k3n", name


def test_compose_puts_flower_behind_basic_auth_and_inference_on_loopback() -> None:
    """Flower is published on every interface: without FLOWER_BASIC_AUTH the file does not validate, and
    no unauthenticated API is switched on; the inference servers are published on loopback only."""
    client = _client()
    if client is None:
        pytest.skip("no compose client here (Debian package docker-compose, or the docker compose plugin)")
    env = {k: v for k, v in os.environ.items() if k != "FLOWER_BASIC_AUTH"}
    env["FARM_API_TOKEN"] = "t0k3n"
    command = [*client, "-f", str(COMPOSE), "--profile", "reference", "config"]
    refused = subprocess.run(command, capture_output=True, text=True, env=env, cwd=COMPOSE.parent)
    assert refused.returncode != 0 and "FLOWER_BASIC_AUTH" in refused.stderr, refused.stderr
    env["FLOWER_BASIC_AUTH"] = "admin:pw"
    given = subprocess.run(command, capture_output=True, text=True, env=env, cwd=COMPOSE.parent)
    assert given.returncode == 0, given.stderr
    import yaml

    services = yaml.safe_load(given.stdout)["services"]
    flower = services["flower"]["environment"]
    assert flower["FLOWER_BASIC_AUTH"] == "admin:pw" and "FLOWER_UNAUTHENTICATED_API" not in flower
    for name in ("vllm", "reference-llm"):
        for port in services[name]["ports"]:
            host_ip = port.get("host_ip", "") if isinstance(port, dict) else ""
            published = port if isinstance(port, str) else f"{host_ip}:{port.get('published')}"
            assert published.startswith("127.0.0.1:"), (name, port)


def test_compose_has_every_role() -> None:
    import yaml  # pulled in by transformers/huggingface-hub

    services = yaml.safe_load(COMPOSE.read_text())["services"]
    assert {"redis", "api", "worker-init", "worker-run", "worker-eval", "flower", "vllm"} <= set(services)
    queues = {
        name: svc["command"][svc["command"].index("-Q") + 1]
        for name, svc in services.items()
        if "worker" in name
    }
    assert queues == {"worker-init": "init", "worker-run": "run", "worker-eval": "eval"}
