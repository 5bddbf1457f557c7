"""compose/docker-compose.yml is valid for a compose client (no engine needed for `config`)."""

from __future__ import annotations

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
    result = subprocess.run(
        [*client, "-f", str(COMPOSE), "config", "--quiet"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


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
