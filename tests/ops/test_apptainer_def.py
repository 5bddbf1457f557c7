"""The Apptainer definition has the header and sections the farm image needs."""

from __future__ import annotations

import re

from tests.ops.conftest import OPS

DEF = OPS / "apptainer" / "farm.def"


def sections() -> dict[str, str]:
    """`%name [app]` -> body, as Apptainer splits a definition file."""
    found: dict[str, str] = {}
    current = None
    for line in DEF.read_text().splitlines():
        match = re.match(r"^%(\w+)(?:\s+(\S+))?\s*$", line)
        if match:
            current = " ".join(filter(None, match.groups()))
            found[current] = ""
        elif current is not None:
            found[current] += line + "\n"
    return found


def header() -> dict[str, str]:
    lines = []
    for line in DEF.read_text().splitlines():
        if line.startswith("%"):
            break
        if line.strip() and not line.startswith("#"):
            lines.append(line)
    return dict(line.split(":", 1) for line in lines)


def test_header_comes_first_and_bootstraps_a_debian_python() -> None:
    first = DEF.read_text().splitlines()[0]
    assert first.startswith("Bootstrap:")
    head = {k.strip(): v.strip() for k, v in header().items()}
    assert head["Bootstrap"] == "docker"
    assert re.fullmatch(r"python:3\.11[\w.-]*-(bookworm|bullseye)", head["From"])


def test_required_sections() -> None:
    found = sections()
    assert {"post", "environment", "runscript", "labels", "help", "test"} <= set(found)
    assert {"apprun api", "apprun worker", "apprun flower", "apprun redis"} <= set(found)


def test_post_installs_the_farm_bubblewrap_and_redis() -> None:
    post = sections()["post"]
    assert re.search(r"apt-get install[^\n]*\\\n[^\n]*\bbubblewrap\b", post)
    assert "redis-server" in post
    assert 'pip install --no-cache-dir "{{ FARM_PIP_SPEC }}"' in post
    assert "FARM_PIP_SPEC=rollout-farm" in sections()["arguments"]


def test_runscript_and_apps_run_the_farm_commands() -> None:
    found = sections()
    assert "exec farm " in found["runscript"]
    assert "celery -A farm worker" in found["apprun worker"]
    assert "celery -A farm flower" in found["apprun flower"]
    assert "--appendonly yes" in found["apprun redis"]
