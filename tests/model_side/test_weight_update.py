"""In-place weight updates on the reference LLM, as a trainer drives SGLang: /update_weights_from_disk loads a
checkpoint without a restart, every /generate answer reports the weight version, and the trainer's own
forward pass recomputes the served (tempered) logprobs on the same weights, before and after updates."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from farm.chat.tokenizer import ChatTokenizer
from farm.inference.backend import BackendClient
from tests.model_side.conftest import ServerProcess

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.integration

MESSAGES = [{"role": "user", "content": "Say something."}]


@pytest.fixture(scope="module")
def updatable_server() -> ServerProcess:
    """A private tiny server (the shared one must keep its weights for the other tests)."""
    server = ServerProcess(["--policy", "tiny", "--emulate", "sglang", "--seed", "3"]).wait_ready(300)
    yield server
    server.proc.terminate()
    server.proc.wait(10)


def _checkpoint(tokenizer: ChatTokenizer, seed: int, path: Path) -> object:
    from transformers import LlamaForCausalLM

    from farm.llm.policies.tiny import tiny_config

    torch.manual_seed(seed)
    model = LlamaForCausalLM(tiny_config(tokenizer, 131072)).eval()
    model.save_pretrained(path)
    return model


def _recompute(model: object, prompt: list[int], ids: list[int], temperature: float) -> list[float]:
    inputs = torch.tensor([[*prompt, *ids]])
    with torch.no_grad():
        logits = model(input_ids=inputs).logits[0, len(prompt) - 1 : -1].float() / temperature  # type: ignore[operator]
    logprobs = torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(ids)[:, None])[:, 0]
    return [float(v) for v in logprobs]


def test_update_in_place_reports_versions_and_logprobs_agree(
    updatable_server: ServerProcess, tokenizer: ChatTokenizer, tmp_path: Path
) -> None:
    root = updatable_server.root
    prompt = tokenizer.apply_chat_template(MESSAGES)
    sampling = {"max_tokens": 16, "temperature": 0.7, "seed": 11}
    assert httpx.get(f"{root}/get_weight_version").json() == {"weight_version": "default"}
    with BackendClient(updatable_server.address, "sglang") as client:
        before = client.generate(prompt, sampling)
        assert before.weight_version == "default"
        for version, seed in (("1", 101), ("2", 202)):
            model = _checkpoint(tokenizer, seed, tmp_path / f"v{version}")
            body = {"model_path": str(tmp_path / f"v{version}"), "weight_version": version}
            answer = httpx.post(f"{root}/update_weights_from_disk", json=body, timeout=60)
            assert answer.status_code == 200 and answer.json()["success"] is True
            after = client.generate(prompt, sampling)
            assert after.weight_version == version
            assert after.token_ids != before.token_ids  # new weights, same seed: another sample
            served = after.logprobs
            mine = _recompute(model, prompt, after.token_ids, sampling["temperature"])
            assert max(abs(a - b) for a, b in zip(served, mine, strict=True)) <= 1e-4
    info = httpx.get(f"{root}/model_info").json()
    assert info["weight_version"] == "2" and info["is_generation"] is True


def test_refused_updates_keep_the_weights(updatable_server: ServerProcess, tmp_path: Path) -> None:
    root = updatable_server.root
    version = httpx.get(f"{root}/get_weight_version").json()["weight_version"]
    missing = httpx.post(f"{root}/update_weights_from_disk", json={"model_path": str(tmp_path / "none")})
    assert missing.status_code == 400 and missing.json()["success"] is False
    aborting = {"model_path": str(tmp_path), "abort_all_requests": True}
    refused = httpx.post(f"{root}/update_weights_from_disk", json=aborting)
    assert refused.status_code == 400 and "aborts nothing" in refused.json()["message"]
    assert httpx.post(f"{root}/update_weights_from_disk", json={}).status_code == 400  # model_path named
    assert httpx.get(f"{root}/get_weight_version").json()["weight_version"] == version


def test_scripted_policy_has_no_weights_but_a_version(scripted_server: ServerProcess) -> None:
    root = scripted_server.root
    answer = httpx.post(f"{root}/update_weights_from_disk", json={"model_path": "/nonexistent"})
    assert answer.status_code == 400 and "no weights" in answer.json()["message"]
    assert httpx.post(f"{root}/update_weight_version", json={"new_version": "7"}).json()["success"]
    assert httpx.get(f"{root}/get_weight_version").json()["weight_version"] == "7"
    httpx.post(f"{root}/update_weight_version", json={"new_version": "default"})
