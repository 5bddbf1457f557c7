"""`farm llm serve --emulate vllm|sglang` refuses what each real server refuses, in its own words and
shape, and `--finish-faults` ends requests with `abort` / `repetition` as the real servers can, so the
farm's clients are tested against what they will meet. Servers run as real subprocesses."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from farm.chat.tokenizer import ChatTokenizer
from farm.gateway.errors import ErrorKind
from farm.gateway.upstream import client_error, error_message
from farm.inference import wire
from farm.inference.backend import BackendClient
from farm.inference.errors import BackendRejected, BackendUnavailable, ContextOverflow
from farm.inference.sampling_keys import SGLANG_KEYS
from farm.llm.cli import llm
from farm.llm.emulation import SGLANG_SAMPLING_PARAMS, ContextWindowExceeded, resolve_max_tokens
from tests.model_side.conftest import ServerProcess
from tests.model_side.test_server import PYTHON_TOOL, QUESTION

pytestmark = pytest.mark.integration

WINDOW = ["--policy", "scripted", "--max-model-len", "1024"]
HELLO = [{"role": "user", "content": "Say hello."}]


FAULTS = {"sglang": "abort=0.5", "vllm": "abort=0.3,repetition=0.3"}


@pytest.fixture(scope="module")
def servers(script_file: Path) -> Iterator[dict[str, ServerProcess]]:
    """One server per kind, started together; faults only touch requests that reach generation."""
    scripts = ["--scripts", str(script_file)]
    started = {
        kind: ServerProcess([*WINDOW, *scripts, "--emulate", kind, "--finish-faults", f])
        for kind, f in FAULTS.items()
    }
    yield {kind: server.wait_ready() for kind, server in started.items()}
    for server in started.values():
        server.stop()


@pytest.fixture(scope="module")
def sglang_server(servers: dict[str, ServerProcess]) -> ServerProcess:
    return servers["sglang"]


@pytest.fixture(scope="module")
def vllm_server(servers: dict[str, ServerProcess]) -> ServerProcess:
    return servers["vllm"]


def test_the_farms_sglang_keys_are_all_sglang_sampling_params() -> None:
    """The farm's list (farm/inference/sampling_keys.py) against the emulator's, each read from SGLang."""
    assert SGLANG_KEYS <= SGLANG_SAMPLING_PARAMS


def test_sglang_generate_refuses_an_unknown_sampling_key(sglang_server: ServerProcess) -> None:
    body = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 4, "bad_words": ["x"]}}
    answer = httpx.post(f"{sglang_server.root}/generate", json=body, timeout=30)
    assert answer.status_code == 400
    assert answer.json() == {"error": {"message": "Unexpected keyword argument 'bad_words'"}}
    assert isinstance(wire.error_for_status(400, answer.text, "b"), BackendRejected)


def test_vllm_refuses_prompt_plus_max_tokens_over_the_window(
    vllm_server: ServerProcess, tokenizer: ChatTokenizer
) -> None:
    prompt = tokenizer.encode("word " * 1000)[:1000]
    body = {"prompt": prompt, "max_tokens": 100, "logprobs": 0, "return_token_ids": True}
    answer = httpx.post(f"{vllm_server.address}/completions", json=body, timeout=30)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["param"] == "max_tokens" and error["code"] == 400 and error["type"] == "BadRequestError"
    assert error["message"].startswith("'max_tokens' or 'max_completion_tokens' is too large: 100.")
    with BackendClient(vllm_server.address, "vllm") as client, pytest.raises(ContextOverflow):
        client.generate(prompt, {"max_tokens": 100})


def test_sglang_chat_overflow_is_a_top_level_error_the_gateway_classifies(
    sglang_server: ServerProcess,
) -> None:
    body = {"model": "m", "messages": HELLO, "max_tokens": 1020}
    answer = httpx.post(f"{sglang_server.address}/chat/completions", json=body, timeout=30)
    data = answer.json()
    assert answer.status_code == 400 and data["object"] == "error" and "error" not in data
    assert data["message"].startswith(
        "Requested token count exceeds the model's maximum context length of 1024"
    )
    assert client_error(400, error_message(data, "")).kind is ErrorKind.context_overflow


def test_sglang_chat_reply_has_sglangs_shape(sglang_server: ServerProcess, tokenizer: ChatTokenizer) -> None:
    """A tool call as serving_chat.py builds it: ids on the choice, content "" not null, call ids
    `call_<24 hex>` with an index, finish tool_calls with matched_stop null, text logprob tokens."""
    body = {"model": "m", "messages": QUESTION, "tools": [PYTHON_TOOL], "max_tokens": 200, "seed": 3,
            "logprobs": True, "return_token_ids": True, "return_meta_info": True}  # fmt: skip
    answer = httpx.post(f"{sglang_server.address}/chat/completions", json=body, timeout=30).json()
    (choice,) = answer["choices"]
    assert "prompt_token_ids" not in answer and answer["metadata"] == {"weight_version": "default"}
    assert choice["prompt_token_ids"] == tokenizer.apply_chat_template(QUESTION, [PYTHON_TOOL])
    assert choice["finish_reason"] == "tool_calls" and choice["matched_stop"] is None
    assert choice["message"]["content"] == "Let me count them." and "reasoning_content" in choice["message"]
    call = choice["message"]["tool_calls"][0]
    assert call["index"] == 0 and call["id"].startswith("call_") and len(call["id"]) == 29
    tokens = [entry["token"] for entry in choice["logprobs"]["content"]]
    assert tokens == [tokenizer.token_text(t) for t in choice["token_ids"]]
    meta = choice["meta_info"]
    assert [e[1] for e in meta["output_token_logprobs"]] == choice["token_ids"]
    assert meta["finish_reason"] == {"type": "tool_calls", "matched": None}  # rewritten in place by SGLang


def test_sglang_refuses_its_token_id_flags_on_a_stream(sglang_server: ServerProcess) -> None:
    for flag in ("return_token_ids", "return_prompt_token_ids", "return_meta_info"):
        body = {"model": "m", "messages": HELLO, "max_tokens": 4, "stream": True, flag: True}
        answer = httpx.post(f"{sglang_server.address}/chat/completions", json=body, timeout=30)
        assert answer.status_code == 400 and answer.json()["message"].startswith(f"{flag} is not supported")


def test_each_server_grants_its_own_budget() -> None:
    """Unset: vLLM grants the rest of the window; SGLang's scheduler grants max_req_len - prompt - 1
    (= window - 2 - prompt). Set: vLLM admits prompt + max == window, SGLang refuses it."""
    assert resolve_max_tokens("vllm", 1024, 1000, None) == 24
    assert resolve_max_tokens("sglang", 1024, 1000, None) == 22
    assert resolve_max_tokens("vllm", 1024, 1000, 24) == 24
    with pytest.raises(ContextWindowExceeded, match="You requested a total of 1024 tokens"):
        resolve_max_tokens("sglang", 1024, 1000, 24)
    with pytest.raises(ContextWindowExceeded, match=r"The input \(1023 tokens\) is longer"):
        resolve_max_tokens("sglang", 1024, 1023, None)


def _outcome(client: BackendClient, prompt: list[int], seed: int) -> str:
    try:
        generation = client.generate(prompt, {"max_tokens": 16, "seed": seed})
    except BackendUnavailable as exc:
        assert "finish_reason 'abort'" in exc.message
        return "abort"
    assert generation.finish_reason in ("stop", "length")
    return "repetition" if generation.stop_reason == "repetition" else "normal"


@pytest.mark.parametrize("kind", ["vllm", "sglang"])
def test_faults_abort_or_end_by_repetition_as_each_server_can(
    servers: dict[str, ServerProcess], tokenizer: ChatTokenizer, kind: str
) -> None:
    """An abort is an unavailable backend (retried elsewhere); vLLM's repetition ends normally and is
    recorded; SGLang has no repetition. Each seed draws the same fault every time."""
    prompt = tokenizer.apply_chat_template(HELLO)
    with BackendClient(servers[kind].address, kind) as client:  # type: ignore[arg-type]
        outcomes = [_outcome(client, prompt, seed) for seed in range(24)]
        assert [_outcome(client, prompt, seed) for seed in range(24)] == outcomes
    expected = {"abort", "repetition", "normal"} if kind == "vllm" else {"abort", "normal"}
    assert set(outcomes) == expected


@pytest.mark.parametrize(
    ("flags", "complaint"),
    [
        (["--emulate", "sglang", "--finish-faults", "repetition=0.1"], "SGLang has no `repetition`"),
        (["--finish-faults", "abort"], "is not reason=chance"),
        (["--finish-faults", "abort=0.7,repetition=0.7"], "add up to more than 1"),
    ],
)
def test_bad_fault_flags_are_a_usage_error(flags: list[str], complaint: str) -> None:
    result = CliRunner().invoke(llm, ["serve", "--port", "1", *flags])
    assert result.exit_code == 2 and complaint in result.output
