"""The emulation answers as the real vLLM does: the cases of tests/emulation/cases.py replayed against
`farm llm serve --emulate vllm --over-window clamp`, compared with the facts recorded from vLLM 0.32 serving
Gemma 3 270M (vllm_conformance.json; re-record with `python -m tests.emulation.record_vllm`).

Differences kept on purpose (docs/CONTRACT.md, "The reference LLM against the real vLLM"):
- `--over-window refuse` stays the default (vLLM before the 0.2x series refused prompt + max_tokens over the
  window with 400; 0.32 clamps): the farm's overflow handling is exercised by the default.
- `logit_bias` is not applied: the scripted policy answers from scripts and `tiny` samples its own logits
  unbiased, so the stop on each end id is compared on the stop the emulation reaches by itself.
- `text_offset` is counted from each token's own text (vLLM counts from its incremental detokenizer): the
  farm never reads it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from farm.chat.tokenizer import ChatTokenizer
from tests.emulation.cases import Server, run_cases, stop_facts_unforced
from tests.model_side.conftest import ServerProcess

pytestmark = pytest.mark.integration

FIXTURE = json.loads(Path(__file__).with_name("vllm_conformance.json").read_text())
WINDOW = 64


@pytest.fixture(scope="module")
def emulated() -> Iterator[Server]:
    process = ServerProcess(["--emulate", "vllm", "--over-window", "clamp", "--max-model-len", str(WINDOW)])
    process.wait_ready(60)
    tokenizer = ChatTokenizer.load(None)
    model = httpx.get(f"{process.address}/models").json()["data"][0]["id"]
    eos = tokenizer.eos_token_id
    ends = tuple(sorted(tokenizer.turn_end_ids() - {eos}))
    yield Server(process.root, model, WINDOW, eos, ends, forced_stop=False)
    process.proc.terminate()
    process.proc.wait(10)


@pytest.fixture(scope="module")
def facts(emulated: Server) -> dict[str, dict[str, Any]]:
    return run_cases(emulated)


CASES = [
    "version",
    "unknown_model",
    "completion",
    "over_window_clamped",
    "prompt_over_window",
    "chat_without_tools",
]


@pytest.mark.parametrize("case", CASES)
def test_case_answers_as_vllm(facts: dict[str, dict[str, Any]], case: str) -> None:
    assert facts[case] == FIXTURE["facts"][case]


def test_a_stop_on_the_turn_end_answers_as_vllm(emulated: Server) -> None:
    tokenizer = ChatTokenizer.load(None)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "What is 2 + 2?"}])
    stop = stop_facts_unforced(emulated, prompt)
    assert stop["finish_reason"] == "stop" and stop["ends_on_an_end_id"]
    expected = FIXTURE["facts"]["stop_on_eos" if stop["stop_reason_rule"] == "none" else "stop_on_end_0"]
    assert stop == expected
