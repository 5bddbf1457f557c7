"""The README's Docker Compose block is true to compose/docker-compose.yml: every variable the file
requires (`${VAR:?...}`) is exported in the block, every profile the block names exists, and a service
that reserves a GPU starts only under a profile the block names (before: `vllm` had none, so
`--profile reference` on a CPU machine started it too; FLOWER_BASIC_AUTH was required but not exported)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose" / "docker-compose.yml"


def compose_block() -> str:
    readme = (ROOT / "README.md").read_text()
    after = readme[readme.index("**Docker Compose.**") :]
    return after[after.index("```bash") : after.index("```", after.index("```bash") + 3)]


def test_every_required_variable_is_exported_in_the_readme_block() -> None:
    required = set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*):\?", COMPOSE.read_text()))
    assert required >= {"FARM_API_TOKEN", "FLOWER_BASIC_AUTH"}
    exported = set(re.findall(r"^export ([A-Z_][A-Z0-9_]*)=", compose_block(), re.M))
    assert required <= exported, (
        f"required by the compose file, not exported in the README: {required - exported}"
    )


def test_profiles_named_exist_and_gpu_services_need_one() -> None:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    profiles = {p for service in services.values() for p in service.get("profiles", [])}
    named = set(re.findall(r"--profile (\S+)", compose_block()))
    assert named and named <= profiles, (named, profiles)
    for name, service in services.items():
        devices = service.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])
        if any("gpu" in d.get("capabilities", []) for d in devices):
            assert set(service.get("profiles", [])) & named, f"{name} reserves a GPU without a named profile"
