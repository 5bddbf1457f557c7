"""The Slurm node scripts run for real on this machine, as srun would start them on three nodes:
head.sh (Redis, API, Flower), cpu-node.sh (one Celery worker per stage, FARM_NODE from
SLURMD_NODENAME) and gpu-node.sh (two inference servers, registered with the farm). A math rollout
goes through them; the alert rules' metrics are read from the live API and Flower; SIGTERM (what
scancel and --signal send) stops every node with nothing left behind.

The inference engine is the one stand-in: a `vllm` on FARM_LLM_VENV that takes `vllm serve`'s
arguments and runs the farm's reference server (`farm llm serve`, which speaks the vLLM subset)."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import httpx
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.ops.slurm_nodes import Nodes, eventually, status, three_nodes
from tests.ops.test_prometheus import metric_names_used

pytestmark = [pytest.mark.integration, pytest.mark.slow]

VLLM_STAND_IN = """#!/usr/bin/env bash
# `vllm serve MODEL --host H --port P [...]` -> the farm's reference server on H:P.
set -euo pipefail
[[ "$1" == serve ]] || exit 64
shift 2
port=8001
{take_host_port}
echo "$CUDA_VISIBLE_DEVICES" >"$(dirname "$0")/devices-$port"
exec {python} -m farm.cli llm serve --policy scripted --accuracy 1.0 --host "$host" --port "$port"
"""


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nodes]:
    with three_nodes(
        tmp_path_factory.mktemp("farm-shared"),
        ("vllm", VLLM_STAND_IN),
        cpu={"FARM_INIT_CONCURRENCY": "2", "FARM_RUN_CONCURRENCY": "4", "FARM_EVAL_CONCURRENCY": "2"},
        gpu={"FARM_LLM_ENGINE": "vllm", "FARM_MODEL": "scripted"},
    ) as farm:
        yield farm


def test_nodes_join_with_their_names_and_backends_register(nodes: Nodes) -> None:
    def workers_up() -> list[dict]:
        workers = [w for w in status(nodes)["workers"] if w["node"] == "cpu-a"]
        return workers if len(workers) == 3 else []

    workers = eventually(workers_up, 90, "the cpu node's three workers did not register")
    assert sorted(w["hostname"] for w in workers) == ["eval@cpu-a", "init@cpu-a", "run@cpu-a"]
    run = next(w for w in workers if w["hostname"] == "run@cpu-a")
    assert sorted(run["queues"]) == ["run", "run.cpu-a"]

    def backends_up() -> list[dict]:
        backends = status(nodes)["backends"]
        return backends if len(backends) == 2 else []

    backends = eventually(backends_up, 90, "the gpu node's two servers did not register")
    assert {b["kind"] for b in backends} == {"vllm"}
    assert all(b["address"].endswith("/v1") and b["healthy"] for b in backends)
    # FARM_LLM_TP=1 on two GPUs: one server per GPU, each seeing only its own.
    devices = sorted(p.read_text().strip() for p in nodes.llm_bin.glob("devices-*"))
    assert devices == ["0", "1"]


def test_a_rollout_runs_through_the_nodes(nodes: Nodes) -> None:
    test_nodes_join_with_their_names_and_backends_register(nodes)
    body = {"instance": {"handler": "math", "question": "What is 6 * 7?", "answer": "42"}}
    result = httpx.post(f"{nodes.api_url}/process", json=body, timeout=60).raise_for_status().json()
    assert result["state"] == "done", result.get("error")
    assert result["trajectory"]["traces"]
    backends = {b["address"] for b in status(nodes)["backends"]}
    # The math handler's traces list every backend the job used (`backends`).
    used = result["trajectory"]["traces"][0]["metadata"]["backends"]
    assert used and set(used) <= backends


def test_alert_metrics_exist_on_the_live_api_and_flower(nodes: Nodes) -> None:
    test_nodes_join_with_their_names_and_backends_register(nodes)

    def names(url: str) -> set[str]:
        text = httpx.get(f"{url}/metrics", timeout=10).raise_for_status().text
        return {s.name for f in text_string_to_metric_families(text) for s in f.samples}

    assert metric_names_used("farm_") <= names(nodes.api_url)

    def flower_sees_workers() -> set[str]:
        found = names(nodes.flower_url)
        return found if "flower_worker_online" in found else set()

    flower = eventually(flower_sees_workers, 60, "Flower reports no worker")
    assert metric_names_used("flower_") <= flower


def test_sigterm_stops_every_node_and_leaves_nothing(nodes: Nodes) -> None:
    test_nodes_join_with_their_names_and_backends_register(nodes)
    children = nodes.descendants()
    assert len(children) >= 6  # redis, api, flower, 3 workers, 2 llm servers
    for name in ("gpu-a", "cpu-a", "head-0"):
        script = nodes.scripts[name]
        script.send_signal(signal.SIGTERM)
        assert script.wait(40) == 0, (nodes.shared / f"{name}.out").read_text()[-2000:]
    _, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, [p.info for p in alive]
    assert not (nodes.shared / "head.env").exists()
