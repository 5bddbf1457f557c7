"""The Prometheus config and alert rules load, their unit tests pass, and every farm metric they
use is one the API really exports."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from farm.api.app import create_app
from farm.settings import Settings
from tests.ops.conftest import OPS, tool

PROM = OPS / "prometheus"
PROMQL_NAME = re.compile(r"\b((?:farm|flower)_[a-z0-9_]+)\b")


def alert_rules() -> list[dict]:
    groups = yaml.safe_load((PROM / "alerts.yml").read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def metric_names_used(prefix: str) -> set[str]:
    return {n for rule in alert_rules() for n in PROMQL_NAME.findall(rule["expr"]) if n.startswith(prefix)}


@pytest.mark.parametrize("name", ["prometheus.yml", "alerts.yml", "alerts_test.yml"])
def test_yaml_loads(name: str) -> None:
    assert isinstance(yaml.safe_load((PROM / name).read_text()), dict)


def test_scrapes_the_api_and_flower() -> None:
    config = yaml.safe_load((PROM / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"rollout-farm-api", "rollout-farm-flower"}
    assert all(job["metrics_path"] == "/metrics" for job in jobs.values())
    assert config["rule_files"] == ["alerts.yml"]


def test_alerts_cover_the_operational_failures() -> None:
    names = {rule["alert"] for rule in alert_rules()}
    assert {"FarmQueueBacklogGrowing", "FarmNoLiveWorkers", "FarmBackendUnhealthy"} <= names
    assert "FarmJobFailureRatioHigh" in names
    for rule in alert_rules():
        assert rule["labels"]["severity"] in ("warning", "critical")
        assert rule["annotations"]["summary"]


def test_promtool_check_config_and_rules() -> None:
    promtool = tool("promtool")
    for args in (["check", "config", "prometheus.yml"], ["check", "rules", "alerts.yml"]):
        result = subprocess.run([promtool, *args], cwd=PROM, capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_alert_unit_tests() -> None:
    promtool = tool("promtool")
    result = subprocess.run(
        [promtool, "test", "rules", "alerts_test.yml"], cwd=PROM, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture
def api_metrics(redis_url: str) -> Iterator[set[str]]:
    """Sample names of the API's /metrics, from the real app on the test's private Redis."""
    app = create_app(Settings(redis_url=redis_url, api_token=None))
    with TestClient(app) as client:
        # One backend, so the per-backend series exist.
        client.post("/add_llm_server", json={"address": "http://127.0.0.1:9/v1"}).raise_for_status()
        text = client.get("/metrics").raise_for_status().text
    yield {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}


def test_every_farm_metric_in_the_alerts_is_exported(api_metrics: set[str]) -> None:
    used = metric_names_used("farm_")
    assert used, "the alerts use no farm_* metric"
    assert used <= api_metrics, f"not exported by GET /metrics: {sorted(used - api_metrics)}"


def test_alert_test_series_use_exported_names(api_metrics: set[str]) -> None:
    text = (PROM / "alerts_test.yml").read_text()
    series = {m for m in PROMQL_NAME.findall(text) if m.startswith("farm_")}
    assert series <= api_metrics, sorted(series - api_metrics)


def test_flower_metrics_are_checked_live_elsewhere() -> None:
    # flower_* names are compared with a running Flower's /metrics in test_slurm_local.py.
    assert metric_names_used("flower_") == {"flower_worker_online"}
    assert Path(__file__).with_name("test_slurm_local.py").exists()
