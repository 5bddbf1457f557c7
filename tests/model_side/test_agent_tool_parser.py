"""The agent loop's parser selection and its never-silent rule, over a canned policy (pure logic: the
farm tests per family, tests/integration/test_family_farms.py, run the same through real processes).

The issue's failure: a Llama 3.1 model's calls under the vocabulary's guess (`hermes`) ended the job
`done` with 0 tool calls and nothing said why. Now each such turn is fed back, recorded and flagged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from farm.agent.loop import AgentConfig, episode_trace, run_agent, select_parser
from farm.agent.tools import FunctionTool
from farm.agent.versions import TurnVersions
from farm.chat.tokenizer import ChatTokenizer
from farm.handler.context import JobContext
from farm.handler.standalone import job_context
from farm.inference.generation import Generation
from farm.jobs.spec import JobSpec

LLAMA_CALL = '{"name": "python", "parameters": {"code": "print(6 * 7)"}}'


class CannedPolicy:
    """Answers each call with the next text, as a backend registered with `tool_call_parser` would."""

    def __init__(self, tokenizer: ChatTokenizer, texts: list[str], parser: str | None = None) -> None:
        self.tokenizer, self.texts = tokenizer, list(texts)
        self.tool_call_parser = parser
        self.backends_used = ["http://canned"]
        self.versions = TurnVersions()
        self.prompts: list[str] = []

    def generate(self, prompt_ids: list[int], sampling: dict[str, Any]) -> Generation:
        self.prompts.append(self.tokenizer.decode(prompt_ids))
        ids = [*self.tokenizer.encode(self.texts.pop(0)), self.tokenizer.eos_token_id]
        return Generation(token_ids=ids, logprobs=[0.0] * len(ids), finish_reason="stop")


def context(
    texts: list[str], metadata: dict[str, Any] | None = None, backend: str | None = None
) -> JobContext:
    tokenizer = ChatTokenizer.load()
    policy = CannedPolicy(tokenizer, texts, backend)
    spec = JobSpec(job_id="j1", handler="math", instance={}, timeout_s=60, metadata=metadata or {})
    return job_context(spec, spec, workdir=Path("/tmp"), policy=policy, tokenizer=lambda: tokenizer)


PYTHON = FunctionTool("python", "run code", {"type": "object", "required": ["code"]}, lambda a: "42")
MESSAGES = [{"role": "user", "content": "What is 6 * 7?"}]


def test_llama_calls_under_the_guessed_parser_are_fed_back_recorded_and_flagged() -> None:
    ctx = context([LLAMA_CALL] * 3)
    episode = run_agent(ctx, MESSAGES, [PYTHON], AgentConfig(max_turns=3))
    assert episode.tool_calls == 0
    assert episode.finish_reason == "tool_call_misses"  # not `answer`, not quietly `max_turns`
    trace = episode_trace(ctx, "math", episode)
    meta = trace.metadata
    assert (meta["tool_call_parser"], meta["tool_call_parser_from"]) == ("hermes", "tokenizer")
    assert [m["turn"] for m in meta["tool_call_misses"]] == [1, 2, 3]
    assert "llama3_json" in meta["tool_call_misses"][0]["errors"][0]
    assert "reward does not measure the task" in meta["flag"]
    # the model was told, in the format the parser reads
    feedback = [m["content"] for m in trace.response_messages if m["role"] == "user"]
    assert len(feedback) == 2 and "<tool_call>" in feedback[0] and "llama3_json" in feedback[0]


def test_the_job_names_the_parser_and_the_call_runs() -> None:
    ctx = context([LLAMA_CALL, "The answer is 42."], {"tool_call_parser": "llama3"})
    episode = run_agent(ctx, MESSAGES, [PYTHON], AgentConfig(max_turns=3))
    assert (episode.tool_calls, episode.finish_reason, episode.final_text) == (
        1,
        "answer",
        "The answer is 42.",
    )
    meta = episode_trace(ctx, "math", episode).metadata
    assert (meta["tool_call_parser"], meta["tool_call_parser_from"], meta["tool_call_misses"]) == (
        "llama3_json",
        "job",
        [],
    )
    assert "flag" not in meta


def test_the_backend_names_the_parser_when_the_job_does_not() -> None:
    ctx = context([LLAMA_CALL, "42"], backend="llama3_json")
    assert select_parser(ctx) == ("llama3_json", "backend")
    episode = run_agent(ctx, MESSAGES, [PYTHON], AgentConfig(max_turns=3))
    assert episode.tool_calls == 1 and episode.tool_call_parser_from == "backend"
    ctx = context([LLAMA_CALL], {"tool_call_parser": "hermes"}, backend="llama3_json")
    assert select_parser(ctx) == ("hermes", "job")


def test_one_missed_turn_among_good_ones_is_recorded_not_flagged() -> None:
    good = '<tool_call>\n{"name": "python", "arguments": {"code": "print(42)"}}\n</tool_call>'
    ctx = context([LLAMA_CALL, good, "42"])
    episode = run_agent(ctx, MESSAGES, [PYTHON], AgentConfig(max_turns=4))
    assert (episode.tool_calls, episode.finish_reason) == (1, "answer")
    meta = episode_trace(ctx, "math", episode).metadata
    assert [m["turn"] for m in meta["tool_call_misses"]] == [1] and "flag" not in meta
