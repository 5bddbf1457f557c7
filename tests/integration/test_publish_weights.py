"""POST /publish_weights without weights to load (the scripted reference LLM, both emulations): the
server's own routes are called in its protocol's order, a reload the server cannot do leaves the update
unconfirmed, so the backend leaves the pool with the server's reason, and the server is resumed (never left
paused). Unknown addresses are 404, a bad request 422 naming the field. The confirmed path with weights:
tests/integration/test_publish_weights_tiny.py (torch) and tests/real_server (the real vLLM)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from farm.client import FarmClient
from farm.launcher import LocalFarm, WorkerSpec
from tests.farms import emulating_farm

pytestmark = [pytest.mark.integration, pytest.mark.slow]

STEPS = {
    "vllm": ["POST /pause 200", "POST /collective_rpc 500", "POST /resume 200"],
    "sglang": [
        "POST /pause_generation 200",
        "POST /update_weights_from_disk 400",
        "POST /continue_generation 200",
    ],
}


@pytest.fixture(scope="module")
def scripted_farm(emulated_kind: str) -> Iterator[tuple[LocalFarm, str]]:
    local = emulating_farm(emulated_kind, [WorkerSpec("init,run,eval", concurrency=2)])
    with local.start(timeout_s=180):
        yield local, emulated_kind


def test_unconfirmed_publish_leaves_the_pool_with_the_servers_reason(
    scripted_farm: tuple[LocalFarm, str],
) -> None:
    local, kind = scripted_farm
    address = local.llm_urls[0]
    root = address.removesuffix("/v1")
    with FarmClient(local.api_url) as farm:
        farm.clear_llm_servers()
        farm.add_llm_server(address, kind=kind, policy_version=1)
        result = farm.publish_weights(2, "/nonexistent/checkpoint", timeout_s=60)
        (report,) = result.backends
        assert report.steps == STEPS[kind]
        assert not report.confirmed and report.removed and result.removed == 1 and result.confirmed == 0
        assert report.reason is not None and "has no weights to load" in report.reason
        unknown = {"vllm": "the publish did not finish", "sglang": "SGLang exposes no aborted-request count"}
        assert report.aborted is None and unknown[kind] in (report.aborted_unknown or "")
        assert result.aborted is None and result.aborts_uncounted == 1
        assert farm.llm_servers() == []
    if kind == "vllm":
        assert httpx.get(f"{root}/is_paused").json() == {"is_paused": False}
        assert httpx.get(f"{root}/weight_info").json() == {"weight_version": "default"}
    body = {"prompt": "hello", "max_tokens": 2}
    assert httpx.post(f"{address}/completions", json=body, timeout=30).status_code == 200  # resumed


def test_publish_refuses_unknown_addresses_and_bad_requests(scripted_farm: tuple[LocalFarm, str]) -> None:
    local, kind = scripted_farm
    with FarmClient(local.api_url) as farm:
        farm.clear_llm_servers()
        nothing = httpx.post(
            f"{local.api_url}/publish_weights", json={"policy_version": 3, "weights_path": "/x"}
        )
        assert nothing.status_code == 409 and "no backend" in nothing.text
        farm.add_llm_server(local.llm_urls[0], kind=kind)
    unknown = httpx.post(
        f"{local.api_url}/publish_weights",
        json={"policy_version": 3, "weights_path": "/x", "addresses": ["http://127.0.0.1:1/v1"]},
    )
    assert unknown.status_code == 404 and "127.0.0.1:1" in unknown.text
    for field, value in (("policy_version", -1), ("pause", "abort"), ("weights_path", "")):
        body = {"policy_version": 3, "weights_path": "/x", field: value}
        answer = httpx.post(f"{local.api_url}/publish_weights", json=body)
        assert answer.status_code == 422 and field in answer.text
