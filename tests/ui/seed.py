"""Writes finished job records the way the farm stores them (hash + index entry), for paging tests: a
10,000-job farm without running 10,000 rollouts."""

from __future__ import annotations

import time

import redis

from farm import keys
from farm.chat.tokenizer import ChatTokenizer
from farm.jobs.spec import JobSpec
from farm.models.results import JobResult, JobState, StageError, Timings, Trace, Trajectory

HANDLERS = ("math", "code", "swe")


def seed_jobs(client: redis.Redis, n: int, prefix: str = "seed", start: float | None = None) -> list[str]:
    """n finished jobs, newest last; every 7th failed, rewards cycle 0/0.5/1, groups of 4."""
    start = time.time() - n * 0.001 if start is None else start
    ids = []
    pipe = client.pipeline(transaction=False)
    for i in range(n):
        job_id = f"{prefix}-{i:05d}"
        handler = HANDLERS[i % 3]
        failed = i % 7 == 0
        meta = {"group_id": f"{prefix}-g{i // 4}", "policy_version": i % 5}
        spec = JobSpec(
            job_id=job_id, handler=handler, instance={"handler": handler}, timeout_s=60, metadata=meta
        )
        result = JobResult(
            job_id=job_id,
            state=JobState.failed if failed else JobState.done,
            handler=handler,
            reward=None if failed else (i % 3) / 2,
            timings=Timings(queued=0.1, init=0.2, run=float(i % 10), eval=0.1),
            error=StageError(stage="run", type="sandbox_crash", message="boom") if failed else None,
            metadata=meta,
        )
        created = start + i * 0.001
        pipe.hset(
            keys.job(job_id),
            mapping={
                "spec": spec.model_dump_json(),
                "state": result.state.value,
                "task_ids": "{}",
                "created_at": created,
                "finished_at": created + 1,
                "t_queued": 0.1,
                "t_init": 0.2,
                "t_run": float(i % 10),
                "t_eval": 0.1,
                "result": result.model_dump_json(),
            },
        )
        pipe.zadd(keys.JOBS_INDEX, {job_id: created})
        ids.append(job_id)
        if len(pipe) >= 2000:
            pipe.execute()
    pipe.execute()
    return ids


def seed_long_job(client: redis.Redis, job_id: str, turns: int = 50, tokens: int = 30_000) -> JobResult:
    """A finished job whose one trace has `turns` sampled turns and tool results between them: `tokens`
    response tokens, drift flags, artifacts and an eval error, stored the way the farm stores results."""
    ids, mask, lps, messages = [], [], [], [{"role": "user", "content": "fix the bug"}]
    per = tokens // (2 * turns)
    tok = ChatTokenizer.load()
    said = tok.encode("I will run the tests, read the failing function and patch the off-by-one. ")
    heard = tok.encode("$ pytest -q\nFAILED tests/test_x.py::test_edge - AssertionError\n")
    for turn in range(turns):
        for k in range(per):
            ids.append(said[(turn + k) % len(said)])
            mask.append(1)
            lps.append(-((turn + k) % 11) / 2)
        messages.append(
            {
                "role": "assistant",
                "content": f"turn {turn}",
                "reasoning_content": f"thinking about turn {turn}",
                "tool_calls": [
                    {"id": f"c{turn}", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
                ],
            }
        )
        ids.extend(heard[k % len(heard)] for k in range(per))
        mask.extend([0] * per)
        lps.extend([0.0] * per)
        messages.append({"role": "tool", "tool_call_id": f"c{turn}", "content": f"output {turn}"})
    trace = Trace(
        prompt_ids=tok.encode("<|im_start|>user\nfix the bug<|im_end|>\n"),
        response_ids=ids,
        loss_mask=mask,
        response_logprobs=lps,
        prompt_messages=messages[:1],
        response_messages=messages[1:],
        finish_reason="stop",
        metadata={
            "builder": "prefix_merging",
            "retokenization_drift": True,
            "drift": [{"turn": 3, "position": 17}],
        },
    )
    result = JobResult(
        job_id=job_id,
        state=JobState.failed,
        handler="swe",
        reward=0.0,
        trajectory=Trajectory(traces=[trace]),
        artifacts={"patch": "--- a/x.py\n+++ b/x.py\n@@\n-bug\n+fix\n", "test_output": "1 failed"},
        timings=Timings(queued=2.0, init=1.0, run=6.0, eval=1.0),
        error=StageError(stage="eval", type="eval_crash", message="pytest exited 2"),
    )
    spec = JobSpec(job_id=job_id, handler="swe", instance={"handler": "swe"}, timeout_s=60)
    now = time.time()
    client.hset(
        keys.job(job_id),
        mapping={
            "spec": spec.model_dump_json(),
            "state": "failed",
            "task_ids": "{}",
            "created_at": now - 10,
            "finished_at": now,  # never ahead of the page's clock (a screenshot read "-4 s ago")
            "result": result.model_dump_json(),
        },
    )
    client.zadd(keys.JOBS_INDEX, {job_id: now})
    return result
