"""A learning run through the farm: `python -m bench.learn`.

The `tiny` policy (the reference LLM's small Llama, farm/llm/policies/tiny.py) learns a tool task through
the farm's public REST API: the math handler's agent loop, its `python` tool in the bubblewrap sandbox and
its evaluator (reward 1 when the \\boxed{} answer is right). Random `tiny` weights sample almost uniformly
(a `<tool_call>` token about once in 7,700), so RL alone cannot find the tool: the run first warm-starts
on farm-generated SFT data (the scripted reference LLM solves each question with one python call; its
successful trajectories go through the SFT adapter, `to_sft_records(style="tokens")`), stopping while the
policy still succeeds only now and then (each question's recorded success sampled with a ~5% chance), then
trains with the compact loop of bench/learning.py: a PPO-clipped token-level policy gradient, four
optimizer steps per batch, the advantage the reward itself (`--baseline zero`: only rewarded episodes are
pushed up; `--baseline group` is Dr. GRPO's group mean, which on this task pushed the shared, already
confident tokens of failed episodes down and left the reward flat or falling: see `grpo_loss`).

After every step the trainer publishes its weights in place (POST /publish_weights: the farm drives the
reference LLM's SGLang routes, pause in place / update_weights_from_disk / continue, confirms the version and
labels the pool with the new policy_version): rollouts kept in flight across the
publish continue (partial rollouts, each turn recording its version), and batches are assembled under a
staleness bound (`--max-offpolicyness`). Per step it prints mean reward, tool calls per episode, the
batch's staleness, and the max / mean |Δ| between the trainer's recomputed logprobs (each turn under the
weights that sampled it) and the farm's; it ends with `reward <start> -> <end> in <N> steps, <T> s`, where
start is the first batch's mean reward (after warm-start, before any RL step) and end the mean of the
last three batches. Results go to farm-runs/learn-<time>.jsonl (`farm report` draws the reward curve), each
with the reward it was trained on (0 without a tool call) and the evaluator's as `metadata.evaluator_reward`.

`--trainer trl` trains the same warm-started policy on the same farm with TRL's own GRPOTrainer instead
(bench/learning_trl.py: its rollout hook takes the DAPO consumer's batches, a callback publishes after each
batch; `--loss-type`, `--scale-rewards`, `--beta`, `--epsilon-high`, `--top-entropy-quantile`, `--lr` and
`--updates` (num_iterations) are passed to its GRPOConfig) and prints the same rows and closing line.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import torch
from rich.console import Console
from rich.table import Table
from transformers import LlamaForCausalLM
from transformers.utils import logging as hf_logging

from bench.learning import (
    Mismatch,
    Publisher,
    Snapshots,
    build_tiny,
    check_trace,
    episode_stats,
    grpo_loss,
    through_the_tool,
    warm_start,
)
from farm.adapters.sft import to_sft_records
from farm.chat.tokenizer import ChatTokenizer
from farm.client import DapoConfig, DapoConsumer, FarmClient
from farm.client.groups import Group
from farm.client.staleness import StalenessReport
from farm.embedded_redis import free_port
from farm.launcher import LocalFarm, WorkerSpec, stop_signals_as_keyboard_interrupt

TEMPERATURE = 1.0


def questions(count: int, seed: int) -> list[dict[str, Any]]:
    """Math-handler instances: `What is A + B?` with two-digit operands (fixed by the seed)."""
    rng = random.Random(seed)
    pairs: list[tuple[int, int]] = []
    while len(pairs) < count:
        pair = (rng.randint(10, 49), rng.randint(10, 49))
        if pair not in pairs:
            pairs.append(pair)
    return [
        {
            "handler": "math",
            "question": f"What is {a} + {b}?",
            "answer": str(a + b),
            "max_turns": 3,
            "max_context_tokens": 1024,
        }
        for a, b in pairs
    ]


def write_scripts(instances: list[dict[str, Any]], path: Path) -> None:
    """The scripted reference LLM's solution of each question: one python call, then the boxed result."""
    with path.open("w") as out:
        for inst in instances:
            a, b = inst["question"].removeprefix("What is ").removesuffix("?").split(" + ")
            steps = [
                {"tool": "python", "arguments": {"code": f"print({a} + {b})"}},
                {"say": "\\boxed{ {{- tool_output -}} }"},
            ]
            out.write(json.dumps({"match": inst["question"], "steps": steps}) + "\n")


def start_llm(
    policy: str, extra: list[str], env: dict[str, str], log: Path
) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    argv = [sys.executable, "-m", "farm.cli", "llm", "serve", "--policy", policy, "--port", str(port), *extra]
    proc = subprocess.Popen(
        argv, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"the {policy} LLM server exited; see {log}")
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    return proc, url
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"the {policy} LLM server did not answer within 120 s; see {log}")
    except BaseException:
        # Ctrl-C or SIGTERM while it starts: it is in a session of its own, so no signal reaches it
        stop_child(proc)
        raise


def stop_child(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def sft_data(farm: FarmClient, instances: list[dict[str, Any]], samples: int) -> list[dict[str, Any]]:
    """Farm-generated SFT data: each question solved by the scripted LLM, kept when rewarded."""
    sampling = {"temperature": TEMPERATURE, "max_tokens": 48}
    ids = [farm.submit(inst, sampling) for inst in instances for _ in range(samples)]
    results = list(farm.as_completed(ids, timeout_s=300))
    unique: dict[str, dict[str, Any]] = {}
    for record in to_sft_records(results, min_reward=1.0, style="tokens"):
        unique.setdefault(json.dumps(record["input_ids"]), record)
    return list(unique.values())


def cycle(instances: list[dict[str, Any]], seed: int) -> Iterator[dict[str, Any]]:
    rng = random.Random(seed)
    for _ in itertools.count():
        order = list(instances)
        rng.shuffle(order)
        yield from order


@dataclass
class Warm:
    """The farm up, the tiny LLM serving, the warm-started policy: what either trainer starts from."""

    local: LocalFarm
    farm: FarmClient
    tiny_url: str
    model: LlamaForCausalLM
    optimizer: torch.optim.Optimizer
    tokenizer: ChatTokenizer
    instances: list[dict[str, Any]]
    work: Path
    run_file: Path
    started: float
    warm_s: float


@contextmanager
def warm_farm(args: argparse.Namespace, console: Console) -> Iterator[Warm]:
    started = time.monotonic()
    torch.set_num_threads(1)
    hf_logging.disable_progress_bar()  # a checkpoint per step: no progress bar each time
    work = Path(tempfile.mkdtemp(prefix="bench-learn-"))
    # the warm start below is a minute or so of silence otherwise
    console.print("starting a farm and the tiny model, then a supervised warm start (about a minute)…")
    instances = questions(args.questions, args.seed)
    write_scripts(instances, work / "scripts.jsonl")
    tokenizer = ChatTokenizer.load(None)
    workers = [WorkerSpec("init,eval", concurrency=4), WorkerSpec("run", concurrency=16)]
    local = LocalFarm(
        workers=workers,
        llm_args=["--scripts", str(work / "scripts.jsonl"), "--no-handler-scripts", "--accuracy", "1"],
        env={"FARM_WORKDIR": str(work / "farm")},
        log_dir=work / "logs",
    )
    tiny: subprocess.Popen[bytes] | None = None
    finished = True
    run_file = Path(args.runs_dir) / f"learn-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
    run_file.parent.mkdir(parents=True, exist_ok=True)
    try:
        with local, FarmClient(local.api_url) as farm:
            env = local.child_env()
            tiny, tiny_url = start_llm("tiny", ["--emulate", "sglang"], env, work / "logs" / "tiny.log")
            records = sft_data(farm, instances, samples=2)
            model = build_tiny(tokenizer, args.seed)
            epochs, chance, optimizer = warm_start(
                model, records, args.warm_target, args.sft_lr, args.sft_max_epochs
            )
            warm_s = time.monotonic() - started
            console.print(
                f"farm up, {len(records)} SFT episodes from the scripted LLM; warm start: {epochs} epochs, "
                f"chance of a recorded success {chance:.2f}, {warm_s:.0f} s since start "
                f"(scratch and logs: {work}, removed at the end)"
            )
            farm.clear_llm_servers()  # the scripted LLM leaves the pool; from here on only `tiny` serves
            yield Warm(
                local, farm, tiny_url, model, optimizer, tokenizer, instances, work, run_file, started, warm_s
            )
    except (KeyboardInterrupt, GeneratorExit):
        finished = True
        raise
    except BaseException:
        finished = False  # kept for its logs, and named
        console.print(f"the run failed; its logs and scratch files are kept in {work}")
        raise
    else:
        finished = True
    finally:
        if tiny is not None:
            stop_child(tiny)
        if finished:
            shutil.rmtree(work, ignore_errors=True)  # tens of MB of checkpoints and farm scratch


def dapo_config(
    args: argparse.Namespace,
    run_file: Path,
    extra_in_flight: int,
    max_offpolicyness: int,
    max_staleness: int | None = None,
) -> DapoConfig:
    return DapoConfig(
        n=args.n,
        concurrency=args.groups * args.n + extra_in_flight,
        sampling_params={"temperature": TEMPERATURE, "max_tokens": 40},
        filter_zero_variance=False,
        carry_over=True,
        max_staleness=max_staleness,
        max_offpolicyness=max_offpolicyness,
        seed=args.seed,
        extra_metadata={"run": run_file.stem},
    )


def record(run_file: Path, groups: list[Group], step: int, version: int) -> None:
    """The run file: each result with the reward it was trained on, the evaluator's beside it."""
    with run_file.open("a") as out:
        for group in groups:
            for result, reward in zip(group.results, group.rewards, strict=True):
                tags = {"step": step, "trainer_version": version, "evaluator_reward": result.reward}
                kept = result.model_copy(update={"reward": reward})
                kept.metadata = {**result.metadata, **tags}
                out.write(kept.model_dump_json() + "\n")


def step_row(
    step: int,
    stats: dict[str, float],
    report: StalenessReport | None,
    mismatch: Mismatch,
    started: float,
) -> dict[str, Any]:
    return {
        "step": step,
        **stats,
        "staleness_max": report.max if report else None,
        "staleness_mean": report.mean if report else None,
        "mixed": report.mixed if report else 0,
        "dropped": report.dropped_groups if report else 0,
        "mismatch_max": mismatch.max,
        "mismatch_mean": mismatch.mean,
        "unchecked": mismatch.tokens_unchecked,
        "elapsed_s": time.monotonic() - started,
    }


def compact_loop(
    warm: Warm, args: argparse.Namespace, console: Console, rows: list[dict[str, Any]]
) -> dict[str, Any]:
    """bench/learning.py's loop; returns what the summary adds (the seconds spent publishing)."""
    model, optimizer = warm.model, warm.optimizer
    publisher = Publisher(warm.farm, [warm.tiny_url], warm.work / "checkpoints")
    snapshots = Snapshots(keep=args.max_offpolicyness + 2)
    version = 0
    publisher.publish(model, version)
    snapshots.add(version, model)
    for options in optimizer.param_groups:
        options["lr"] = args.lr
    extra = 8 if args.extra_in_flight is None else args.extra_in_flight
    config = dapo_config(args, warm.run_file, extra, args.max_offpolicyness)
    with DapoConsumer(warm.local.api_url, cycle(warm.instances, args.seed), config) as dapo:
        for step in range(args.steps):
            batch = dapo.next_batch(args.groups, policy_version=version, timeout_s=600)
            groups = [through_the_tool(g) for g in batch.groups]
            results = batch.results
            mismatch = Mismatch()
            for result in results:
                for trace in result.trajectory.traces:
                    check_trace(trace, snapshots, TEMPERATURE, mismatch)
            stats = episode_stats(results, [w for g in groups for w in g.rewards])
            for _ in range(args.updates):  # PPO epochs: the clipped ratio bounds how far they go
                loss, tokens = grpo_loss(model, groups, TEMPERATURE, baseline=args.baseline)
                if not tokens:
                    break
                optimizer.zero_grad()
                (loss / tokens).backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
            record(warm.run_file, groups, step, version)
            version += 1
            publisher.publish(model, version)
            snapshots.add(version, model)
            rows.append(step_row(step, stats, batch.stats.staleness, mismatch, warm.started))
            console.print(_line(rows[-1]))
            if time.monotonic() - warm.started > args.max_seconds:
                console.print(f"stopping: {args.max_seconds:.0f} s budget spent")
                break
    return {"publish_s": publisher.seconds, **_publish_counts(publisher)}


def trl_loop(
    warm: Warm, args: argparse.Namespace, console: Console, rows: list[dict[str, Any]]
) -> dict[str, Any]:
    """TRL's GRPOTrainer (bench/learning_trl.py) on the same farm: its rollout hook takes DAPO-consumer
    batches, a callback publishes after each batch. Returns what the summary adds: the seconds spent
    publishing and, per batch, the tokens the hook handed TRL to train and TRL's own logged metrics."""
    from bench import learning_trl

    publisher = Publisher(warm.farm, [warm.tiny_url], warm.work / "checkpoints")
    snapshots = Snapshots(keep=2)
    versions = learning_trl.Versions()
    publisher.publish(warm.model, versions.current)
    snapshots.add(versions.current, warm.model)
    # TRL's ratio is against its own recomputation under the weights it holds (no sampler correction
    # without vLLM): only groups sampled by exactly those weights are admitted (bench/learning_trl.py), and
    # work carried from an older version is cancelled, so by default nothing runs beyond the batch (it would
    # only take CPU from TRL's step and then be thrown away)
    extra = 0 if args.extra_in_flight is None else args.extra_in_flight
    config = dapo_config(args, warm.run_file, extra, max_offpolicyness=0, max_staleness=0)

    def on_batch(batch: learning_trl.Rollouts, version: int) -> bool:
        step = len(rows)
        record(warm.run_file, batch.groups, step, version)
        stats = learning_trl.batch_stats(batch)
        rows.append(step_row(step, stats, batch.staleness, batch.mismatch, warm.started))
        console.print(_line(rows[-1]))
        if time.monotonic() - warm.started > args.max_seconds:
            console.print(f"stopping: {args.max_seconds:.0f} s budget spent")
            return True
        return False

    options = learning_trl.TrlOptions(
        loss_type=args.loss_type,
        scale_rewards=args.scale_rewards,
        beta=args.beta,
        num_iterations=args.updates,
        learning_rate=args.lr,
        epsilon_high=args.epsilon_high,
        top_entropy_quantile=args.top_entropy_quantile,
    )
    with DapoConsumer(warm.local.api_url, cycle(warm.instances, args.seed), config) as dapo:
        rollouts = learning_trl.FarmRolloutFunc(
            dapo, args.n, versions, snapshots, TEMPERATURE, warm.tokenizer.eos_token_id
        )
        callback = learning_trl.PublishEachBatch(
            publisher, snapshots, versions, rollouts, options.num_iterations, on_batch
        )
        trainer = learning_trl.train(
            warm.model,
            warm.optimizer,
            warm.tokenizer.hf,
            [inst["question"] for inst in warm.instances],
            rollouts,
            callback,
            options,
            groups=args.groups,
            steps=args.steps,
            seed=args.seed,
            output_dir=str(warm.work / "trl"),
        )
    return {
        "publish_s": publisher.seconds,
        **_publish_counts(publisher),
        "trl": {
            "sampled_tokens": [b.sampled_tokens for b in rollouts.batches],
            "masked_tokens": [b.masked_tokens for b in rollouts.batches],
            "unmatched_prompts": sum(b.unmatched_prompts for b in rollouts.batches),
            "log_history": trainer.state.log_history,
        },
    }


def run(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    loop = trl_loop if args.trainer == "trl" else compact_loop
    with warm_farm(args, console) as warm:
        extra = loop(warm, args, console, rows)
    elapsed = time.monotonic() - warm.started
    summary = _summary(rows, elapsed, warm.warm_s, extra.pop("publish_s"), warm.run_file)
    summary.update(extra, trainer=args.trainer)
    console.print(_table(rows))
    console.print(
        f"publishes {summary['publishes']} confirmed, {summary['publish_in_flight']} calls in flight across "
        f"them, {summary['publish_aborted']} aborted"
    )
    console.print(
        f"reward {summary['start']:.2f} -> {summary['end']:.2f} in {len(rows)} steps, {elapsed:.0f} s"
    )
    return summary


def _publish_counts(publisher: Publisher) -> dict[str, int]:
    return {
        "publishes": publisher.publishes,
        "publish_in_flight": publisher.in_flight,
        "publish_aborted": publisher.aborted,
    }


def _line(row: dict[str, Any]) -> str:
    return (
        f"step {row['step']:3d}  reward {row['reward']:.2f} (evaluator {row['evaluator_reward']:.2f})  "
        f"tool calls/ep {row['tool_calls']:.2f} "
        f"(per success {row['tool_calls_success']:.2f})  "
        f"staleness max {row['staleness_max']} mean {row['staleness_mean']:.2f} (mixed {row['mixed']}, "
        f"dropped {row['dropped']})  |Δ| max {row['mismatch_max']:.1e} mean {row['mismatch_mean']:.1e}  "
        f"{row['elapsed_s']:.0f} s"
    )


def _table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title="learning run: tiny policy, math + python tool, through the farm's REST API")
    for column in ("step", "reward", "tool calls/ep", "calls/success", "staleness max", "staleness mean",
                   "mixed-version", "|Δ| max", "|Δ| mean", "s"):  # fmt: skip
        table.add_column(column, justify="right")
    for r in rows:
        table.add_row(
            str(r["step"]),
            f"{r['reward']:.2f}",
            f"{r['tool_calls']:.2f}",
            "-" if math.isnan(r["tool_calls_success"]) else f"{r['tool_calls_success']:.2f}",
            str(r["staleness_max"]),
            f"{r['staleness_mean']:.2f}",
            str(r["mixed"]),
            f"{r['mismatch_max']:.1e}",
            f"{r['mismatch_mean']:.1e}",
            f"{r['elapsed_s']:.0f}",
        )
    return table


def _summary(
    rows: list[dict[str, Any]], elapsed: float, warm_s: float, publish_s: float, run_file: Path
) -> dict[str, Any]:
    tail = rows[-3:]
    wins = [r for r in tail if not math.isnan(r["tool_calls_success"])]
    return {
        "start": rows[0]["reward"],
        "end": sum(r["reward"] for r in tail) / len(tail),
        "steps": len(rows),
        "seconds": elapsed,
        "warm_start_s": warm_s,
        "publish_s": publish_s,
        "tool_calls_per_success_end": sum(r["tool_calls_success"] for r in wins) / len(wins)
        if wins
        else None,
        "mismatch_max": max(r["mismatch_max"] for r in rows),
        "staleness_max": max((r["staleness_max"] or 0) for r in rows),
        "run_file": str(run_file),
        "load_avg": os.getloadavg(),
    }


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.learn", description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--groups", type=int, default=2, help="groups (prompts) per step")
    parser.add_argument("--n", type=int, default=8, help="samples per prompt")
    parser.add_argument("--questions", type=int, default=1,
                        help="distinct questions (2 learn more slowly: digits get mixed)")  # fmt: skip
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--baseline", choices=("group", "zero"), default="zero",
                        help="advantage baseline: group mean (Dr. GRPO) or none (see grpo_loss)")  # fmt: skip
    parser.add_argument("--updates", type=int, default=4,
                        help="optimizer steps on each batch (PPO epochs; TRL's num_iterations)")  # fmt: skip
    parser.add_argument("--sft-lr", type=float, default=3e-3)
    parser.add_argument("--sft-max-epochs", type=int, default=150)
    parser.add_argument("--warm-target", type=float, default=0.05,
                        help="stop warm-starting once a recorded success has this chance at T=1")  # fmt: skip
    parser.add_argument("--extra-in-flight", type=int, default=None,
                        help="rollouts kept running across each publish beyond the batch (compact: 8, "
                        "trl: 0)")  # fmt: skip
    parser.add_argument("--max-offpolicyness", type=int, default=1, help="compact only (trl: 0)")
    parser.add_argument("--max-seconds", type=float, default=540)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trainer", choices=("compact", "trl"), default="compact",
                        help="bench/learning.py's loop, or TRL's GRPOTrainer (bench/learning_trl.py; "
                        "pip install -e '.[trl]')")  # fmt: skip
    trl = parser.add_argument_group("--trainer trl", "GRPOConfig options (TRL's names and defaults)")
    trl.add_argument("--loss-type", default="dapo", help="grpo, dr_grpo, dapo, bnpo, cispo, sapo, ...")
    trl.add_argument("--scale-rewards", default="group", choices=("group", "batch", "none"))
    trl.add_argument("--beta", type=float, default=0.0, help="KL coefficient (0: no reference model)")
    trl.add_argument("--epsilon-high", type=float, default=None, help="upper clip (DAPO's clip-higher: 0.28)")
    trl.add_argument("--top-entropy-quantile", type=float, default=1.0,
                     help="train only the tokens above this entropy quantile (1.0: all)")  # fmt: skip
    parser.add_argument("--runs-dir", default="farm-runs")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    with stop_signals_as_keyboard_interrupt():  # SIGTERM too stops the farm it started
        return run(parse(argv), Console(width=150))


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        # the farm, the tiny server and the scratch directory are stopped and removed on the way out
        print("interrupted; everything it started is stopped", file=sys.stderr)
        sys.exit(130)
