"""ops/slurm/gpu-node.sh with FARM_LLM_ENGINE=sglang, run for real beside head.sh and cpu-node.sh: its
servers register as kind "sglang" at the address add_llm_server documents, with a tool-call parser, and
a math rollout goes through SGLang's /generate.

The engine is the one stand-in: a `python` on FARM_LLM_VENV that takes `python -m sglang.launch_server`'s
arguments and runs the farm's reference server as SGLang (`farm llm serve --emulate sglang`)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.ops.slurm_nodes import Nodes, eventually, status, three_nodes

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SGLANG_STAND_IN = """#!/usr/bin/env bash
# `python -m sglang.launch_server --model-path M --host H --port P [...]` -> the reference server as SGLang.
set -euo pipefail
[[ "$1 $2" == "-m sglang.launch_server" ]] || exit 64
echo "$*" >"$(dirname "$0")/args-$$"
shift 2
port=30000
{take_host_port}
exec {python} -m farm.cli llm serve --emulate sglang --policy scripted --accuracy 1.0 \\
    --host "$host" --port "$port"
"""


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nodes]:
    with three_nodes(
        tmp_path_factory.mktemp("farm-shared-sglang"),
        ("python", SGLANG_STAND_IN),
        cpu={"FARM_RUN_CONCURRENCY": "2"},
        gpu={"FARM_LLM_ENGINE": "sglang", "FARM_MODEL": "Qwen/Qwen3-8B"},
    ) as farm:
        yield farm


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
