"""The Grafana dashboard loads as a dashboard and every farm metric its panels plot is one the API's
/metrics really exports (same check as the alert rules, tests/ops/test_prometheus.py)."""

from __future__ import annotations

import json
import re
from typing import Any

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from farm.api.app import create_app
from farm.settings import Settings
from tests.ops.conftest import OPS

DASHBOARD = OPS / "grafana" / "rollout-farm.json"
FARM_NAME = re.compile(r"\b(farm_[a-z0-9_]+)\b")


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def test_dashboard_is_a_grafana_dashboard() -> None:
    board = dashboard()
    assert board["uid"] == "rollout-farm" and board["panels"]
    for panel in board["panels"]:
        assert panel["title"] and panel["targets"], panel
        assert panel["datasource"]["uid"] == "${datasource}"
    assert [v["name"] for v in board["templating"]["list"]] == ["datasource"]


def test_every_plotted_metric_is_exported(redis_url: str) -> None:
    app = create_app(Settings(redis_url=redis_url, api_token=None))
    with TestClient(app) as client:
        client.post("/add_llm_server", json={"address": "http://127.0.0.1:9/v1"}).raise_for_status()
        text = client.get("/metrics").raise_for_status().text
    exported = set()
    for family in text_string_to_metric_families(text):
        exported.add(family.name)  # families without samples yet (no worker live) count too
        if family.type == "counter":
            exported.add(family.name + "_total")  # what a counter's samples are named once there are some
        exported.update(sample.name for sample in family.samples)
    plotted = {
        name for p in dashboard()["panels"] for t in p["targets"] for name in FARM_NAME.findall(t["expr"])
    }
    assert plotted and plotted <= exported, sorted(plotted - exported)
