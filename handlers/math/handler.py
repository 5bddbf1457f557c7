"""`math`: the policy may compute with a python tool (in the job's sandbox) and must give its final
answer as \\boxed{...}; the reward is 1 when that answer is equivalent to the reference, else 0."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from farm.agent.loop import AgentLimits, agent_config, episode_trace, run_agent
from farm.agent.sandbox_tools import sandbox_tools
from farm.agent.tools import FunctionTool
from farm.handler.context import JobContext
from farm.handler.protocol import AgentHandler, EvalOutput, HandlerInstance, RunOutput
from handlers.math.grading import extract_boxed, is_equivalent
from handlers.math.python_tool import exec_python_tool
from handlers.sandboxing import open_sandbox, start_sandbox, stop_sandbox

SYSTEM_PROMPT = (
    "You are a careful mathematician. You may call the `python` tool to compute and the `think` tool "
    "to reason step by step. "
    "When you are done, reply without a tool call and put the final answer in \\boxed{}."
)


class MathInstance(HandlerInstance, AgentLimits):
    question: str = Field(min_length=1)
    answer: str = Field(min_length=1, coerce_numbers_to_str=True)
    """Reference answer; any form sympy can compare (6507, 3/4, \\frac{3}{4}, 0.75); a JSON number is
    taken as its text (`"answer": 5`)."""
    max_turns: int = Field(6, ge=1, le=64)
    max_context_tokens: int = Field(8192, ge=256)
    tool_timeout_s: float = Field(10.0, gt=0, le=300)
    python: Literal["exec", "ipython"] = "exec"
    """`exec`: a fresh interpreter in the sandbox per call (milliseconds, nothing to start);
    `ipython`: a persistent kernel in the sandbox, state kept across calls (about a CPU-second to
    start per rollout, so it pays off only for long, stateful sessions)."""


class MathHandler(AgentHandler[MathInstance]):
    name = "math"
    instance_model = MathInstance

    def init(self, ctx: JobContext[MathInstance]) -> dict[str, Any]:
        warm = ["python"] if ctx.instance.python == "ipython" else []
        return {"sandbox": start_sandbox(ctx, warm_tools=warm)}

    def tools(self, inst: MathInstance, state: dict[str, Any]) -> list[FunctionTool]:
        sandbox = open_sandbox(state)
        think = sandbox_tools(sandbox, ["think"], inst.tool_timeout_s)
        if inst.python == "exec":
            return [exec_python_tool(sandbox, inst.tool_timeout_s), *think]
        return sandbox_tools(sandbox, ["python", "think"], inst.tool_timeout_s)

    def run(self, ctx: JobContext[MathInstance], state: dict[str, Any]) -> RunOutput:
        inst = ctx.instance
        config = agent_config(inst)
        tools = self.tools(inst, state)
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": inst.question}]
        episode = run_agent(ctx, messages, tools, config)
        trace = episode_trace(ctx, self.name, episode)
        answer = extract_boxed(episode.final_text)
        return RunOutput(
            traces=[trace],
            artifacts={"answer": answer, "final_text": episode.final_text},
            finish_reason=episode.finish_reason,
            outcome=episode.outcome,
            metadata={"turns": episode.turns, "tool_calls": episode.tool_calls},
        )

    def prewarm(self, stages: set[str]) -> None:
        if "eval" in stages:
            is_equivalent("\\boxed{\\frac{3}{4}}", "0.75")  # the first comparison builds sympy's caches

    def eval(self, ctx: JobContext[MathInstance], state: dict[str, Any], run: RunOutput) -> EvalOutput:
        final = run.artifacts.get("final_text") or ""
        correct = run.finish_reason == "answer" and is_equivalent(final, ctx.instance.answer)
        return EvalOutput(reward=1.0 if correct else 0.0, metadata={"correct": correct})

    def teardown(self, ctx: JobContext[MathInstance], state: dict[str, Any]) -> None:
        stop_sandbox(state)
