"""The pinned harness CLI table, its cache location, and what `farm demo --harness` grants sandboxes."""

from __future__ import annotations

from pathlib import Path

import pytest

from farm.demo import HARNESS_TEST, _harness_env, harness_task
from handlers.harness.clis import HARNESS_CLIS, install_prefix


def test_every_named_harness_has_a_pinned_cli_in_the_configured_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FARM_HARNESS_CLI_CACHE", str(tmp_path))
    assert set(HARNESS_CLIS) == {"pi", "claude_code", "codex", "qwen_code", "gemini_cli", "opencode"}
    prefixes = {install_prefix(cli) for cli in HARNESS_CLIS.values()}
    assert len(prefixes) == len(HARNESS_CLIS) and all(p.parent == tmp_path for p in prefixes)
    assert install_prefix(HARNESS_CLIS["pi"]).name == "pi-coding-agent-0.73.1"


def test_demo_grants_the_install_prefix_and_keeps_earlier_grants(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FARM_HARNESS_CLI_DIRS", "/opt/tools")
    env = _harness_env("/home/u/.cache/rollout-farm/harness-cli/pi-0.1/node_modules/.bin/pi")
    assert env == {"FARM_HARNESS_CLI_DIRS": "/opt/tools:/home/u/.cache/rollout-farm/harness-cli/pi-0.1"}
    assert _harness_env("pi") == {}  # on PATH: nothing to grant


def test_demo_harness_task_is_the_scripted_calc_fix() -> None:
    body = harness_task("t", "codex", "/x/codex", samples=3)
    assert body["agent"] == {"harness": "codex", "command": "/x/codex"} and body["num_samples"] == 3
    assert body["evaluator"]["config"] == {
        "command": "python3 test_calc.py",
        "fresh": True,
        "files": {"test_calc.py": HARNESS_TEST},  # the evaluator's own copy (issue 34 item 9)
    }
