"""`swe`: resolve a GitHub-style issue in a repository (SWE-bench / SWE-Gym instances).

init checks the repository out at `base_commit` in the job's sandbox; run lets the policy work with
`bash` and `editor` until it calls `finish` (or a limit ends the episode) and takes `git diff` against
the base commit as the `patch` artifact; eval scores that patch in a fresh checkout with the test patch
(see evaluation.py). Instance fields: instance.py.
"""

from __future__ import annotations

import logging
from typing import Any

from farm.agent.loop import agent_config, episode_trace, run_agent
from farm.agent.sandbox_tools import sandbox_tools
from farm.handler.context import JobContext
from farm.handler.protocol import AgentHandler, EvalOutput, RunOutput
from handlers.sandboxing import open_sandbox, start_sandbox, stop_sandbox
from handlers.swe.evaluation import evaluate_patch
from handlers.swe.instance import SweInstance
from handlers.swe.repository import (
    check_source,
    prepare_repository,
    sandbox_env,
    source_binds,
    workspace_diff,
)

log = logging.getLogger(__name__)
TOOLS = ["bash", "editor", "finish"]
PREPARE_TIMEOUT_S = 600.0
SYSTEM_PROMPT = (
    "You are an expert software engineer. A repository is checked out in your sandbox and a user "
    "reports an issue with it. Resolve the issue by editing the repository's source files: use `bash` "
    "to explore and run commands, and `editor` to view and change files. Do not modify the existing "
    "tests. When the issue is resolved, call `finish` with a short summary of your change."
)


def user_prompt(inst: SweInstance, workdir: str) -> str:
    return (
        f"<issue>\n{inst.problem_statement.strip()}\n</issue>\n\n"
        f"The repository {inst.repo} is checked out at {workdir} (commit {inst.base_commit[:12]}). "
        "Make the smallest change to the non-test files that resolves the issue. "
        f"You can run the tests with `{inst.test_command}`. Call `finish` when you are done."
    )


class SweHandler(AgentHandler[SweInstance]):
    name = "swe"
    instance_model = SweInstance

    def init(self, ctx: JobContext[SweInstance]) -> dict[str, Any]:
        inst = ctx.instance
        check_source(inst, network=bool(ctx.spec.runtime.get("network", False)))
        env = sandbox_env(ctx.spec.runtime)
        state: dict[str, Any] = {"sandbox": start_sandbox(ctx, ro_binds=source_binds(inst), env=env)}
        try:
            timeout = max(1.0, min(ctx.remaining(), PREPARE_TIMEOUT_S))
            state["base_commit"] = prepare_repository(open_sandbox(state), inst, timeout_s=timeout)
        except BaseException:
            stop_sandbox(state)  # the stage gets no state back to tear down
            raise
        return state

    def run(self, ctx: JobContext[SweInstance], state: dict[str, Any]) -> RunOutput:
        inst = ctx.instance
        sandbox = open_sandbox(state)
        config = agent_config(inst, finish_tool="finish")
        messages = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": user_prompt(inst, sandbox.workdir)},
        ]
        episode = run_agent(ctx, messages, sandbox_tools(sandbox, TOOLS, inst.tool_timeout_s), config)
        # Taken whatever ended the episode (max turns, context, deadline): a truncated rollout's patch
        # still says what the policy did. The sandbox outlives the job's budget by a margin for this.
        patch, patch_error = "", None
        try:
            sandbox.quiesce()  # nothing the agent left running changes the tree while git reads it
            patch = workspace_diff(sandbox, state["base_commit"])
        except Exception as exc:
            log.warning("no patch for %s: %s", ctx.job_id, exc)
            patch_error = f"{type(exc).__name__}: {exc}"[:500]
        trace = episode_trace(ctx, self.name, episode, instance_id=inst.instance_id)
        return RunOutput(
            traces=[trace],
            artifacts={"patch": patch, "final_text": episode.final_text},
            finish_reason=episode.finish_reason,
            outcome=episode.outcome,
            metadata={
                "turns": episode.turns,
                "tool_calls": episode.tool_calls,
                "patch_bytes": len(patch.encode()),
                "patch_error": patch_error,
            },
        )

    def eval(self, ctx: JobContext[SweInstance], state: dict[str, Any], run: RunOutput) -> EvalOutput:
        inst = ctx.instance
        if ctx.spec.evaluator.get("strategy") == "swebench":
            inst = inst.model_copy(update={"evaluator": "swebench"})
        verdict = evaluate_patch(
            inst,
            run.artifacts.get("patch") or "",
            runtime=ctx.spec.runtime,
            timeout_s=max(1.0, min(inst.eval_timeout_s, ctx.remaining())),
            check=ctx.check,
        )
        ctx.check()  # a test run cut short by the job's budget is a timeout, not a wrong patch
        return EvalOutput(
            reward=verdict.reward,
            metadata={
                "instance_id": inst.instance_id,
                "resolved": verdict.resolved,
                "applied": verdict.applied,
                "fail_to_pass": verdict.fail_to_pass,
                "pass_to_pass": verdict.pass_to_pass,
                "test_outcomes": verdict.outcomes,
                "eval_log_tail": verdict.log,
                "eval_timed_out": verdict.timed_out,
                "evaluator": verdict.evaluator,
                "eval_s": round(verdict.duration_s, 3),
                "patch_error": run.metadata.get("patch_error"),
                **({"refused_paths": verdict.refused_paths} if verdict.refused_paths else {}),
                **({"evaluation_refused": verdict.evaluation_refused} if verdict.evaluation_refused else {}),
            },
        )

    def teardown(self, ctx: JobContext[SweInstance], state: dict[str, Any]) -> None:
        stop_sandbox(state)
