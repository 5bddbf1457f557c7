"""`code`: the policy writes a Python solution to /workspace/solution.py with the `editor` tool, may run
it with `bash`, and ends with `finish` (or a plain answer). Eval runs hidden tests against that file in a
fresh sandbox; the reward is 1.0 only when every hidden test passes (the pass fraction is in metadata).

Instance fields (besides `"handler": "code"`):

- `prompt` (str, required; `instruction` is accepted too): the problem statement, shown first in the
  first user message.
- `entry_point` (str, optional): the function or class the solution must define; named in the message.
- `hidden_tests` (str, required): Python source of a test module. It imports from the solution
  (`from solution import f`) and defines top-level `test*` functions that assert; each one is a test.
  It is never shown to the policy nor written to the run sandbox.
- `public_tests` (str, optional): tests in the same form, shown in the message and written to
  /workspace/test_public.py, runnable with `python3 test_public.py`.
- `starter_code` (str, optional): initial content of /workspace/solution.py.
- `max_turns` (int, default 10), `max_context_tokens` (int, default 8192): agent-loop limits.
- `tool_timeout_s` (float, default 30): per tool call.
- `test_timeout_s` (float, default 30): budget of the whole hidden-test run. Each test (and loading the
  tests) gets a fair share of what is left; an endless loop or a crash fails its test, never the job.

Only solution.py is graded, whatever the finish reason (trainers can mask truncated episodes).
Artifacts: `solution` (its source, None when missing), `final_text`, and from eval `test_results` (per
test: name, ok, error). Metadata: `tests_passed`, `tests_total`, `pass_fraction`, `tests_timed_out`,
`failure_log`, and `solution_missing` when there was nothing to grade.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from containers import ExecServerError, Sandbox, SandboxError, SandboxLimitExceeded, get_runtime
from containers.tools.registry import openai_tools
from farm.agent.loop import agent_config, episode_trace, run_agent
from farm.agent.sandbox_tools import sandbox_tools
from farm.agent.tools import FunctionTool
from farm.handler.context import JobContext
from farm.handler.protocol import AgentHandler, EvalOutput, RunOutput
from handlers.code.grading import RUNNER_SOURCE, TestReport, list_tests, parse_report, runner_request
from handlers.code.instance import CodeInstance
from handlers.code.prompting import SOLUTION_PATH, SYSTEM_PROMPT, starter_files, user_message
from handlers.sandboxing import open_sandbox, sandbox_spec, start_sandbox, stop_sandbox

MAX_SOLUTION_BYTES = 200_000
GRADING_ATTEMPTS = 2
"""Fresh sandboxes the hidden tests may run in when one dies under them (see CodeHandler.eval)."""
RUNNER_GRACE_S = 15.0
"""Interpreter start-up and reporting time on top of `test_timeout_s` before the run is killed."""


def finish_tool() -> FunctionTool:
    """`finish` for the policy to see; the loop ends the episode on it before it would be called."""
    function = openai_tools(["finish"])[0]["function"]
    return FunctionTool(
        function["name"],
        function["description"],
        function["parameters"],
        lambda arguments: str(arguments.get("answer") or ""),
    )


def read_solution(sandbox: Sandbox) -> tuple[str | None, str | None]:
    """(source, None), or (None, why) when there is no readable solution. Read inside the sandbox, so a
    symlink resolves in the sandbox's view of the filesystem, never the host's."""
    script = (
        f'f={SOLUTION_PATH}; [ -f "$f" ] || exit 3; '
        f'[ "$(stat -c %s "$f")" -le {MAX_SOLUTION_BYTES} ] || exit 4; cat "$f"'
    )
    try:
        sandbox.quiesce()  # nothing the agent left running may swap the file while it is read (issue 34)
        result = sandbox.exec(script, timeout=20.0)
    except SandboxLimitExceeded:
        raise  # a resource failure of the job, not a missing solution
    except SandboxError as exc:
        return None, f"could not read {SOLUTION_PATH}: {exc}"
    if result.exit_code == 3:
        return None, f"{SOLUTION_PATH} was not written"
    if result.exit_code == 4:
        return None, f"{SOLUTION_PATH} is larger than {MAX_SOLUTION_BYTES} bytes"
    if not result.ok:
        return None, f"could not read {SOLUTION_PATH}: {result.stderr.strip()[:300]}"
    return result.stdout, None


def write_files(sandbox: Sandbox, files: dict[str, str]) -> None:
    """Workspace-relative path → content, into the sandbox's workspace."""
    if not files:
        return
    with tempfile.TemporaryDirectory(prefix="code-files-") as tmp:
        for name, content in files.items():
            path = Path(tmp, name)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content, encoding="utf-8")
        sandbox.upload(tmp, sandbox.workdir)


def run_hidden_tests(
    sandbox: Sandbox,
    tests: str,
    names: list[str],
    solution: str,
    budget_s: float,
    grace_s: float = RUNNER_GRACE_S,
) -> TestReport:
    """Uploads the solution and runs the hidden tests against it in `sandbox` (which should be fresh)."""
    write_files(sandbox, {"solution.py": solution})
    request = runner_request(tests, names, sandbox.workdir, budget_s)
    try:
        result = sandbox.exec(
            ["python3", "-I", "-c", RUNNER_SOURCE],
            cwd=sandbox.workdir,
            stdin=json.dumps(request),
            timeout=budget_s + grace_s,
        )
    except ExecServerError as exc:  # killed from outside (an infrastructure failure), or by the solution
        report = TestReport.not_run(names, f"the sandbox failed while the tests ran: {exc}")
        return report.model_copy(update={"sandbox_lost": True})
    return parse_report(
        result.stdout,
        request["nonce"],
        names,
        timed_out=result.timed_out,
        exit_code=result.exit_code,
        stderr=result.stderr,
    )


class CodeHandler(AgentHandler[CodeInstance]):
    name = "code"
    instance_model = CodeInstance

    def init(self, ctx: JobContext[CodeInstance]) -> dict[str, Any]:
        state = {"sandbox": start_sandbox(ctx)}
        try:
            write_files(open_sandbox(state), starter_files(ctx.instance))
        except BaseException:
            stop_sandbox(state)  # the farm tears down only what a returned state names
            raise
        return state

    def run(self, ctx: JobContext[CodeInstance], state: dict[str, Any]) -> RunOutput:
        inst = ctx.instance
        sandbox = open_sandbox(state)
        tools = [*sandbox_tools(sandbox, ["editor", "bash"], inst.tool_timeout_s), finish_tool()]
        config = agent_config(inst, finish_tool="finish")
        messages = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": user_message(inst)},
        ]
        episode = run_agent(ctx, messages, tools, config)
        solution, missing = read_solution(sandbox)
        trace = episode_trace(ctx, self.name, episode)
        metadata: dict[str, Any] = {"turns": episode.turns, "tool_calls": episode.tool_calls}
        if missing:
            metadata["solution_missing"] = missing
        return RunOutput(
            traces=[trace],
            artifacts={"solution": solution, "final_text": episode.final_text},
            finish_reason=episode.finish_reason,
            outcome=episode.outcome,
            metadata=metadata,
        )

    def eval(self, ctx: JobContext[CodeInstance], state: dict[str, Any], run: RunOutput) -> EvalOutput:
        inst = ctx.instance
        names = list_tests(inst.hidden_tests)
        solution = run.artifacts.get("solution")
        extra: dict[str, Any] = {}
        if not isinstance(solution, str):
            why = run.metadata.get("solution_missing") or f"{SOLUTION_PATH} was not written"
            report = TestReport.not_run(names, why)
            extra["solution_missing"] = why
        else:
            # A fresh sandbox: the run's is gone, and nothing the policy left behind may touch the grading.
            spec = sandbox_spec(
                ctx, network=False, die_with_parent=True, ttl_s=inst.test_timeout_s + RUNNER_GRACE_S + 60
            )
            backend = ctx.spec.runtime.get("backend", "local")
            for attempt in range(1, GRADING_ATTEMPTS + 1):
                with get_runtime(backend).start(spec) as sandbox:
                    report = run_hidden_tests(
                        sandbox, inst.hidden_tests, names, solution, inst.test_timeout_s
                    )
                if not report.sandbox_lost:
                    break
                # A sandbox killed from outside (OOM killer, a sweep, a lost server) graded nothing: a 0
                # from it would be a fake one, so the tests run again in another fresh sandbox. A solution
                # that kills its own sandbox kills the second as well (the whole pid namespace goes either
                # way, so the two cannot be told apart from here): it is then graded 0 like any crash.
                extra["eval_sandbox_lost"] = attempt
        return EvalOutput(
            reward=report.reward,
            artifacts={"test_results": [o.model_dump() for o in report.outcomes]},
            metadata={**report.metadata(), **extra},
        )

    def teardown(self, ctx: JobContext[CodeInstance], state: dict[str, Any]) -> None:
        stop_sandbox(state)
