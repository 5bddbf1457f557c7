"""What a worker says at start about the sandbox capabilities it cannot give, one line each, and which
checkouts a sandbox can be kept from seeing."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from containers import launch
from tasks import host_checks


def test_the_worker_logs_each_missing_capability_once_at_start(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    line = "network sandboxes unavailable: pasta not found; fix: apt-get install passt"
    monkeypatch.setattr("containers.local.host_problems", lambda: [line])
    with caplog.at_level(logging.WARNING):
        host_checks._check_sandbox_capabilities(sender=None)
    assert [r.getMessage() for r in caplog.records] == [line]


@pytest.mark.parametrize("venv", [True, False])
def test_a_checkout_is_hidden_unless_the_interpreter_itself_lives_in_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, venv: bool
) -> None:
    checkout = tmp_path / "rollout-farm"
    prefix = checkout / (".venv" if venv else "python")
    prefix.mkdir(parents=True)
    (checkout / "pyproject.toml").write_text("")
    if venv:
        (prefix / "pyvenv.cfg").write_text("")
    monkeypatch.setattr(sys, "path", [str(checkout), *sys.path])
    monkeypatch.setattr(sys, "prefix", str(prefix))
    monkeypatch.setattr(sys, "exec_prefix", str(prefix))
    if not venv:
        monkeypatch.setattr(sys, "base_prefix", str(prefix))
    launch.project_roots.cache_clear()
    try:
        hidden, visible = launch.project_roots()
    finally:
        launch.project_roots.cache_clear()
    if venv:
        assert str(checkout) in hidden and str(checkout) not in visible
    else:
        assert str(checkout) in visible and str(checkout) not in hidden
