"""POST /publish_weights with weights to load (the `tiny` torch policy; the model extra): with rollouts in
flight, a checkpoint is reloaded in place through the emulated server's own routes (vLLM's and SGLang's),
the server confirms the version, only then the pool is labelled; nothing in flight is aborted, every
rollout finishes, the served logprobs change, and turns that were in flight record the change
(`turn_version_changes`). tests/integration/test_publish_weights.py covers what needs no weights."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from farm.chat.tokenizer import ChatTokenizer
from farm.client import FarmClient
from farm.launcher import LocalFarm, WorkerSpec
from farm.models import JobState
from tests.farms import emulating_farm
from tests.waiting import wait_until

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.integration, pytest.mark.slow]

STEPS = {
    "vllm": [
        "POST /pause 200",
        "POST /collective_rpc 200",
        "POST /update_weight_version 200",
        "GET /weight_info 200",
        "POST /resume 200",
    ],
    "sglang": [
        "POST /pause_generation 200",
        "POST /update_weights_from_disk 200",
        "POST /continue_generation 200",
        "GET /get_weight_version 200",
    ],
}


@pytest.fixture(scope="module")
def tiny_farm(emulated_kind: str) -> Iterator[tuple[LocalFarm, str]]:
    workers = [WorkerSpec("init,eval", concurrency=4), WorkerSpec("run", concurrency=8)]
    local = emulating_farm(emulated_kind, workers, "tiny", ("--seed", "3", "--token-latency-ms", "40"))
    with local.start(timeout_s=300):
        with FarmClient(local.api_url) as farm:
            farm.clear_llm_servers()
            farm.add_llm_server(local.llm_urls[0], kind=emulated_kind, policy_version=0)
        yield local, emulated_kind


def _checkpoint(path: Path, seed: int) -> Path:
    from transformers import LlamaForCausalLM

    from farm.llm.policies.tiny import tiny_config

    torch.manual_seed(seed)
    LlamaForCausalLM(tiny_config(ChatTokenizer.load(None), 131072)).save_pretrained(path)
    return path


def _logprobs(address: str, kind: str) -> list[float]:
    body = {"prompt": [1, 2, 3, 4], "max_tokens": 4, "temperature": 0, "logprobs": 0, "model": "x"}
    if kind == "sglang":
        answer = httpx.post(
            f"{address.removesuffix('/v1')}/generate",
            json={
                "input_ids": [1, 2, 3, 4],
                "sampling_params": {"max_new_tokens": 4, "temperature": 0},
                "return_logprob": True,
            },
        ).json()
        return [row[0] for row in answer["meta_info"]["output_token_logprobs"]]
    body.pop("model")
    answer = httpx.post(f"{address}/completions", json=body).json()
    return list(answer["choices"][0]["logprobs"]["token_logprobs"])


def test_publish_mid_rollouts_confirmed_and_nothing_aborted(
    tiny_farm: tuple[LocalFarm, str], tmp_path: Path
) -> None:
    local, kind = tiny_farm
    address = local.llm_urls[0]
    before = _logprobs(address, kind)
    instance = {"handler": "math", "question": "What is 2 + 3?", "answer": "5", "max_turns": 2}
    with FarmClient(local.api_url) as farm:
        ids = [farm.submit(instance, {"temperature": 1.0, "max_tokens": 24}) for _ in range(6)]
        wait_until(lambda: sum(b.in_flight for b in farm.llm_servers()) >= 1, 120, what="a call in flight",
                   interval_s=0.05)  # fmt: skip
        result = farm.publish_weights(1, str(_checkpoint(tmp_path / "v1", seed=11)))
        (report,) = result.backends
        assert report.confirmed, report
        assert report.steps == STEPS[kind]
        assert report.served_version == "1" and not report.removed
        assert result.confirmed == 1 and result.removed == 0
        if kind == "vllm":
            assert report.aborted == 0 and result.aborted == 0
        (backend,) = farm.llm_servers()
        assert backend.policy_version == 1 and backend.publishing is None
        results = list(farm.as_completed(ids, timeout_s=300))
    assert [r.state for r in results] == [JobState.done] * 6, [r.error for r in results]
    assert _logprobs(address, kind) != before  # the served weights changed


def test_spanning_turns_are_marked(tiny_farm: tuple[LocalFarm, str], tmp_path: Path) -> None:
    """A call that was in flight while the backend was being published records the change in its turn.
    The tiny policy answers in milliseconds, so a batch may finish between the in-flight check and the
    pause: a publish that found no call in flight (its own count says so) is tried again with a new batch."""
    local, _ = tiny_farm
    instance = {"handler": "math", "question": "What is 4 + 4?", "answer": "8", "max_turns": 1}
    with FarmClient(local.api_url) as farm:
        for attempt in range(5):
            (backend,) = farm.llm_servers()
            start = backend.policy_version or 0
            ids = [farm.submit(instance, {"temperature": 1.0, "max_tokens": 48}) for _ in range(4)]
            wait_until(lambda: sum(b.in_flight for b in farm.llm_servers()) >= 2, 120, what="calls in flight",
                       interval_s=0.02)  # fmt: skip
            result = farm.publish_weights(
                start + 1, str(_checkpoint(tmp_path / f"v{attempt}", seed=5 + attempt))
            )
            assert result.confirmed == 1
            results = list(farm.as_completed(ids, timeout_s=300))
            if result.in_flight:
                break
        assert result.in_flight, "no publish found a call in flight in five batches"
    changes = [
        change
        for r in results
        for trace in r.trajectory.traces
        for change in trace.metadata.get("turn_version_changes", [])
    ]
    assert changes, "no turn recorded that it spanned the publish"
    assert all(c["from"] == start and c["to"] == start + 1 for c in changes)
