"""The systemd units parse (`systemd-analyze verify`) and stop gracefully."""

from __future__ import annotations

import configparser
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ops.conftest import OPS, tool

UNITS = sorted((OPS / "systemd").glob("rollout-farm*.*"))
SERVICES = [u for u in UNITS if u.suffix == ".service"]
INSTALL_BIN = "/opt/rollout-farm/venv/bin"


def parse_unit(path: Path) -> configparser.RawConfigParser:
    parser = configparser.RawConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(path.read_text().replace("\\\n", " "))
    return parser


def test_every_process_kind_has_a_unit() -> None:
    names = {u.name for u in UNITS}
    kinds = ["api", "worker-init", "worker-run", "worker-eval", "flower", "llm"]
    assert {f"rollout-farm-{kind}.service" for kind in kinds} <= names
    assert "rollout-farm.target" in names


def test_systemd_analyze_verify(tmp_path: Path) -> None:
    """Verified as installed, with ExecStart pointing at this environment's `farm` and `celery`
    (verify insists the executables exist)."""
    systemd_analyze = tool("systemd-analyze")
    here = str(Path(sys.executable).parent)
    for unit in UNITS:
        (tmp_path / unit.name).write_text(unit.read_text().replace(INSTALL_BIN, here))
    result = subprocess.run(
        [systemd_analyze, "verify", "--man=no", *(str(tmp_path / u.name) for u in UNITS)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "", result.stderr


@pytest.mark.parametrize("unit", SERVICES, ids=lambda u: u.name)
def test_service_reads_the_env_file_and_stops_gracefully(unit: Path) -> None:
    service = parse_unit(unit)["Service"]
    assert service["EnvironmentFile"] == "/etc/rollout-farm/env"
    assert service["KillSignal"] == "SIGTERM"
    assert 0 < int(service["TimeoutStopSec"]) <= 600
    assert service["ExecStart"].startswith(INSTALL_BIN + "/")
    assert service.get("Restart") == "on-failure"


@pytest.mark.parametrize("kind", ["init", "run", "eval"])
def test_worker_units_consume_their_own_queue(kind: str) -> None:
    service = parse_unit(OPS / "systemd" / f"rollout-farm-worker-{kind}.service")["Service"]
    argv = service["ExecStart"].split()
    assert argv[argv.index("-Q") + 1] == kind
    # %H, not %h: in a unit %h is the user's home directory.
    assert f"{kind}@%H" in argv
    # Warm shutdown hands work back; the rest of the cgroup (sandboxes) is killed at the timeout.
    assert service["KillMode"] == "mixed"


def test_env_example_names_only_settings_the_units_or_the_farm_read() -> None:
    from farm.settings import Settings

    farm_fields = {f"FARM_{name.upper()}" for name in Settings.model_fields}
    units_text = "\n".join(u.read_text() for u in UNITS)
    keys = re.findall(r"^#? ?(FARM_[A-Z0-9_]+)=", (OPS / "systemd" / "env.example").read_text(), re.M)
    assert "FARM_REDIS_URL" in keys
    for key in keys:
        assert key in farm_fields or f"${{{key}}}" in units_text, f"{key} is read by nothing"
