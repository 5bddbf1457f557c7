"""Multi-turn rollouts through a real farm whose workers and reference LLM use a Gemma 3 tokenizer and
Gemma 3's published template (tests/templates/gemma3.py: Gemma 3 270M's own vocabulary, and the stand-in):
every job ends done after a tool turn, tool results go back as a user turn, and at every turn the farm's
context is exactly the template's rendering of the conversation as sampled. And a worker given a template
the farm cannot render fails each job at once with the reason, instead of running it."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from farm.chat.tokenizer import ChatTokenizer
from farm.models.results import JobState
from tests.farms import tokenizer_farm
from tests.integration.jobs import assert_token_faithful, process
from tests.templates.gemma3 import GemmaUnavailable, real_gemma3_dir, stand_in_gemma3_dir
from tests.templates.invariant import as_sampled
from tests.templates.test_gemma3 import BROKEN

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]
CODE = Path(__file__).resolve().parents[2] / "handlers" / "code" / "problems.jsonl"


def _tokenizer_dir(kind: str, root: Path) -> str:
    if kind == "stand-in":
        return str(stand_in_gemma3_dir(root))
    try:
        return str(real_gemma3_dir())
    except (GemmaUnavailable, ImportError) as exc:
        pytest.skip(f"Gemma 3's own tokenizer is not available: {exc}")


@pytest.fixture(scope="module", params=["stand-in", "real"])
def gemma_farm(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[httpx.Client, ChatTokenizer]]:
    tokenizer = _tokenizer_dir(request.param, tmp_path_factory.mktemp("gemma"))
    with tokenizer_farm(tokenizer, 4) as (api, _):
        yield api, ChatTokenizer.load(tokenizer)


def test_rollouts_with_gemma3_are_rendered_as_its_template_renders_them(
    gemma_farm: tuple[httpx.Client, ChatTokenizer],
) -> None:
    api, gemma = gemma_farm
    math = {"handler": "math", "question": "What is 84 * 76 + 123?", "answer": "6507"}
    code = {"handler": "code", **json.loads(CODE.read_text().splitlines()[0])}
    for seed, instance in enumerate([math, code]):
        result = process(api, instance, seed)
        assert result.state is JobState.done, result.error
        assert result.reward == 1.0, (result.handler, result.artifacts)
        assert_token_faithful(result, gemma)
        trace = result.trajectory.traces[0]
        roles = [m["role"] for m in trace.response_messages]
        assert roles[:3] == ["assistant", "user", "assistant"], roles  # the results, as a user turn
        assert trace.response_messages[1]["content"].startswith("<tool_response>\n")
        text = gemma.decode(trace.response_ids)
        assert re.match(r"\[\w+\(", text) and text.endswith("<end_of_turn>"), text[:300]  # a pythonic call
        assert "<eos>" not in text and "<bos>" not in text
        assert (trace.metadata["tool_call_parser"], trace.metadata["tool_call_misses"]) == ("pythonic", [])
        context = trace.prompt_ids + trace.response_ids
        for start, messages in as_sampled(trace, gemma):
            rendered = gemma.apply_chat_template(messages, trace.tools, add_generation_prompt=True)
            assert context[: len(trace.prompt_ids) + start] == rendered, gemma.decode(rendered)


def test_a_worker_with_a_template_the_farm_cannot_render_fails_each_job_with_the_reason(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    root = tmp_path_factory.mktemp("broken")
    good = stand_in_gemma3_dir(root)
    broken = root / "broken-gemma"
    hf = ChatTokenizer.load(str(good)).hf
    saved = hf.chat_template
    try:
        hf.chat_template = BROKEN["numbers its turns"][0]
        hf.save_pretrained(str(broken))
    finally:
        hf.chat_template = saved
    math = {"handler": "math", "question": "What is 84 * 76 + 123?", "answer": "6507"}
    with tokenizer_farm(str(broken), 2, llm_tokenizer=str(good)) as (api, _):
        result = process(api, math, 0)
    assert result.state is JobState.failed and result.error is not None, result
    assert "the farm cannot render conversations as its chat template does" in result.error.message
    assert "'broken-gemma' (family gemma" in result.error.message
    assert not result.trajectory or not result.trajectory.traces
