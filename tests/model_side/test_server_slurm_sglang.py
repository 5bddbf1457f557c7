"""ops/slurm/gpu-node.sh with FARM_LLM_ENGINE=sglang, run for real beside head.sh and cpu-node.sh: its
servers register as kind "sglang" at the address add_llm_server documents, with a tool-call parser, and
a math rollout goes through SGLang's /generate.

The engine is the one stand-in: a `python` on FARM_LLM_VENV that takes `python -m sglang.launch_server`'s
arguments and runs the farm's reference server as SGLang (`farm llm serve --emulate sglang`)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from farm.embedded_redis import free_port, redis_server_binary
from tests.ops.test_slurm_local import SLURM, Nodes, eventually, status, two_free_ports

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SGLANG_STAND_IN = """#!/usr/bin/env bash
# `python -m sglang.launch_server --model-path M --host H --port P [...]` -> the reference server as SGLang.
set -euo pipefail
[[ "$1 $2" == "-m sglang.launch_server" ]] || exit 64
echo "$*" >"$(dirname "$0")/args-$$"
shift 2
host=127.0.0.1
port=30000
while (($#)); do
    case "$1" in
    --host) host="$2"; shift 2 ;;
    --port) port="$2"; shift 2 ;;
    *) shift ;;
    esac
done
exec {python} -m farm.cli llm serve --emulate sglang --policy scripted --accuracy 1.0 \\
    --host "$host" --port "$port"
"""


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nodes]:
    shared = tmp_path_factory.mktemp("farm-shared-sglang")
    llm_bin = shared / "sglang-venv" / "bin"
    llm_bin.mkdir(parents=True)
    (llm_bin / "python").write_text(SGLANG_STAND_IN.format(python=sys.executable))
    (llm_bin / "python").chmod(0o755)
    api_port, flower_port = free_port(), free_port()
    path = os.pathsep.join(
        [str(Path(sys.executable).parent), str(Path(redis_server_binary()).parent), os.environ["PATH"]]
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("FARM_", "SLURM", "CUDA_"))},
        "PATH": path,
        "FARM_OPS_DIR": str(SLURM),
        "FARM_SHARED_DIR": str(shared),
        "FARM_BIND_HOST": "127.0.0.1",
        "FARM_HEAD_HOST": "127.0.0.1",
        "FARM_LLM_HOST": "127.0.0.1",
        "FARM_REDIS_PORT": str(free_port()),
        "FARM_REDIS_DIR": str(shared / "redis"),
        "FARM_API_PORT": str(api_port),
        "FARM_FLOWER_PORT": str(flower_port),
        "FARM_STOP_GRACE_S": "20",
        "FARM_HEAD_WAIT_S": "90",
        "FARM_WORKDIR": str(shared / "work"),
    }
    farm = Nodes(env, shared, f"http://127.0.0.1:{api_port}", f"http://127.0.0.1:{flower_port}", llm_bin)
    try:
        farm.start("head-0", "head.sh")
        eventually(lambda: (shared / "head.env").exists(), 90, "no head.env")
        farm.start("cpu-a", "cpu-node.sh", FARM_NODE_QUEUES="init,run,eval", FARM_RUN_CONCURRENCY="2")
        farm.start(
            "gpu-a",
            "gpu-node.sh",
            FARM_LLM_ENGINE="sglang",
            FARM_MODEL="Qwen/Qwen3-8B",
            FARM_LLM_VENV=str(llm_bin.parent),
            FARM_LLM_PORT=str(two_free_ports()),
            FARM_LLM_READY_WAIT_S="90",
            CUDA_VISIBLE_DEVICES="0,1",
            FARM_LLM_TP="1",
        )
        yield farm
    finally:
        farm.kill_all()


def test_sglang_servers_register_as_sglang_and_serve_a_rollout(nodes: Nodes) -> None:
    def backends_up() -> list[dict]:
        backends = status(nodes)["backends"]
        return backends if len(backends) == 2 and all(b["healthy"] for b in backends) else []

    backends = eventually(backends_up, 120, "the gpu node's two SGLang servers did not register")
    assert {b["kind"] for b in backends} == {"sglang"}
    assert all(b["address"].endswith("/v1") for b in backends)
    launched = [p.read_text() for p in nodes.llm_bin.glob("args-*")]
    assert len(launched) == 2 and all("--tool-call-parser qwen25" in args for args in launched)
    assert all("--model-path Qwen/Qwen3-8B" in args and "--tp-size 1" in args for args in launched)
    body = {"instance": {"handler": "math", "question": "What is 6 * 7?", "answer": "42"}}
    result = httpx.post(f"{nodes.api_url}/process", json=body, timeout=90).raise_for_status().json()
    assert result["state"] == "done", result.get("error")
    used = result["trajectory"]["traces"][0]["metadata"]["backends"]
    assert used and set(used) <= {b["address"] for b in backends}
