"""compose's `monitoring` profile ships the dashboard tests/ops/test_grafana.py checks (every query names a
metric the farm exports), wired to a Prometheus that scrapes the API with its token."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.ops.test_grafana import DASHBOARD, dashboard

COMPOSE = Path(__file__).parents[2] / "compose"


def _compose() -> dict[str, Any]:
    return dict(yaml.safe_load((COMPOSE / "docker-compose.yml").read_text()))


def _mounts(service: dict[str, Any]) -> dict[Path, str]:
    mounts = {}
    for volume in service["volumes"]:
        source, target = volume.split(":")[:2]
        if source.startswith("."):
            mounts[(COMPOSE / source).resolve()] = target
    return mounts


def test_grafana_of_the_monitoring_profile_provisions_the_checked_dashboard() -> None:
    services = _compose()["services"]
    grafana, prometheus = services["grafana"], services["prometheus"]
    assert grafana["profiles"] == ["monitoring"] and prometheus["profiles"] == ["monitoring"]
    mounts = _mounts(grafana)
    assert DASHBOARD.resolve() in mounts
    provider = yaml.safe_load((COMPOSE / "monitoring" / "grafana" / "dashboards.yml").read_text())
    [folder] = [p["options"]["path"] for p in provider["providers"]]
    assert mounts[DASHBOARD.resolve()].startswith(folder + "/")
    [source] = yaml.safe_load((COMPOSE / "monitoring" / "grafana" / "datasources.yml").read_text())[
        "datasources"
    ]
    assert source["type"] == "prometheus" and source["url"] == "http://prometheus:9090"
    assert {d["datasource"]["type"] for d in dashboard()["panels"]} == {"prometheus"}
    # published on loopback only
    assert all(p.startswith("127.0.0.1:") for s in (grafana, prometheus) for p in s["ports"])


def test_prometheus_scrapes_the_api_with_the_token_its_entrypoint_writes() -> None:
    prometheus = _compose()["services"]["prometheus"]
    config_path = next(
        source for source, target in _mounts(prometheus).items() if target.endswith("prometheus.yml")
    )
    config = yaml.safe_load(config_path.read_text())
    [job] = config["scrape_configs"]
    assert job["static_configs"][0]["targets"] == ["api:8000"] and job["metrics_path"] == "/metrics"
    token_file = job["authorization"]["credentials_file"]
    assert f"> {token_file}" in " ".join(prometheus["entrypoint"])
    assert "FARM_API_TOKEN" in prometheus["environment"]
