"""The job state store on a real local Redis Cluster (three masters; tests/core/redis_cluster.py) with the
Celery broker on a plain Redis, as FARM_REDIS_URL=redis+cluster://... and FARM_BROKER_URL make it.

Jobs are spread over CLUSTER_BUCKETS hash tags (farm/keys.py): each job script's keys share its job's
tag, so every script runs on one node; the stage messages go to the broker after the script that
records their stage, and the stall sweep re-sends one lost in between."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import pytest
import redis

import tasks.reaper
import tasks.resume
from farm import keys
from farm.builders.records import CallFailure, CompletionRecord
from farm.celery_app import create_app
from farm.gateway.sessions import SessionStore
from farm.jobs.dispatch import stage_task_id
from farm.jobs.messages import StageMessages
from farm.jobs.spec import JobSpec
from farm.jobs.store import JobStore, StageHandoff, terminal_result
from farm.keys import CLUSTER_BUCKETS, Layout
from farm.models.results import JobState
from farm.redis_clients import async_redis_client
from farm.settings import get_settings
from tests.core.redis_cluster import LocalCluster, missing_binaries

pytestmark = pytest.mark.skipif(missing_binaries() is not None, reason=str(missing_binaries()))
FOLLOWING = {"init": "run", "run": "eval"}


@pytest.fixture(scope="module")
def cluster() -> Iterator[redis.RedisCluster]:
    local = LocalCluster().start()
    client = local.client()
    try:
        yield client
    finally:
        client.close()
        local.stop()


@pytest.fixture
def messages(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[StageMessages]:
    """Stage messages as kombu lays them out on the broker (the plain Redis of the test)."""
    monkeypatch.setenv("FARM_REDIS_URL", redis_url)
    get_settings.cache_clear()
    built = StageMessages(create_app())
    yield built
    get_settings.cache_clear()


@pytest.fixture
def store(cluster: redis.RedisCluster, redis_client: redis.Redis) -> JobStore:
    cluster.flushall()
    made = JobStore(cluster, ttl_s=3600, broker=redis_client)  # type: ignore[arg-type]
    assert made.layout == Layout(CLUSTER_BUCKETS)  # from the client, whatever the settings say
    return made


def create(store: JobStore, messages: StageMessages, job_id: str) -> None:
    spec = JobSpec(job_id=job_id, handler="noop", instance={}, timeout_s=60.0)
    init = messages.build(job_id, "init", stage_task_id(job_id, "init"), "init")
    assert store.create(spec, {"init": stage_task_id(job_id, "init")}, init)


def waiting(broker: redis.Redis, messages: StageMessages, stage: str) -> list[str]:
    """Task ids of the messages waiting in `stage`'s queue on the broker."""
    found = []
    for key in messages.queue_keys(stage):
        for raw in broker.lrange(key, 0, -1):
            found.append(json.loads(raw)["headers"]["id"])
    return found


def test_the_cluster_runs_a_script_whose_keys_share_a_hash_tag(cluster: redis.RedisCluster) -> None:
    slots = {cluster.keyslot(k) for k in ("farm:{j1}:job", "farm:{j1}:lease", "farm:{j2}:job")}
    assert len(slots) == 2  # the tag, not the key, picks the slot
    script = cluster.register_script(
        "redis.call('HSET', KEYS[1], 'a', ARGV[1]); return redis.call('INCR', KEYS[2])"
    )
    assert script(keys=["farm:{j1}:job", "farm:{j1}:lease"], args=["x"]) == 1
    assert cluster.hget("farm:{j1}:job", "a") == "x"
    assert len({cluster.get_node_from_key(f"farm:{{j{i}}}:job").port for i in range(32)}) == 3  # spread


def test_jobs_run_their_stages_on_the_cluster_with_the_broker_apart(
    store: JobStore, messages: StageMessages, cluster: redis.RedisCluster
) -> None:
    ids = [f"job-{n}" for n in range(12)]
    assert len({cluster.get_node_from_key(store.layout.job(j)).port for j in ids}) == 3  # on every master
    for job_id in ids:
        create(store, messages, job_id)
    assert sorted(waiting(store.broker, messages, "init")) == sorted(f"{j}.init" for j in ids)  # type: ignore[arg-type]
    assert store.counts_by_state() == {"queued": len(ids)}
    held = {job_id: store.begin_stage(job_id, "init", "w0")[2] for job_id in ids}
    assert store.renew(held) == set()  # one script per bucket, each routed to its master
    assert store.renew({**held, ids[0]: held[ids[0]] + 1}) == {ids[0]}
    for job_id in ids:
        store.release(job_id, held[job_id], restart_from_init=False)
    for job_id in ids:
        for stage in ("init", "run", "eval"):
            verdict, record, token = store.begin_stage(job_id, stage, "w1")
            assert verdict == "go" and record is not None
            if stage == "eval":
                assert store.finalize(terminal_result(record, JobState.done), token=token)
                continue
            nxt = FOLLOWING[stage]
            message = messages.build(job_id, nxt, stage_task_id(job_id, nxt), nxt)
            out = {"init_state" if stage == "init" else "run_output": {"ok": 1}}
            made = StageHandoff("n1", **out)
            assert store.end_stage(job_id, token, stage, 0.01, message, made)
    assert store.counts_by_state() == {"done": len(ids)}
    assert store.active_ids() == []
    assert len(waiting(store.broker, messages, "eval")) == len(ids)  # each hand-off reached the broker
    record = store.get(ids[0])
    assert record is not None and record.state is JobState.done and record.stage_done("run")


def test_a_lost_lease_is_fenced_on_the_cluster(store: JobStore, messages: StageMessages) -> None:
    create(store, messages, "fenced")
    _, _, token = store.begin_stage("fenced", "init", "w1")
    k = store.keys("fenced")
    store._r.hset(k.job, "lease_expires", 0)
    store._r.zadd(k.leases, {"fenced": 0})
    reaped = store.reap()
    assert [(r.job_id, r.stage, r.infra_retries) for r in reaped] == [("fenced", "init", 1)]
    following = messages.build("fenced", "run", "fenced.run", "run")
    assert not store.end_stage("fenced", token, "init", 0.1, following)  # the presumed-dead attempt
    verdict, _, retry = store.begin_stage("fenced", "init", "w2")
    assert verdict == "go" and retry > token
    assert store.end_stage("fenced", retry, "init", 0.1, following)


def test_the_stall_sweep_sends_a_message_lost_before_the_broker(
    store: JobStore, messages: StageMessages, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job recorded on the cluster whose init message never reached the broker (the process died
    between the script and the push) is found by the stall sweep and sent again."""
    create(store, messages, "stalled")
    broker: redis.Redis = store.broker  # type: ignore[assignment]
    for key in messages.queue_keys("init"):
        broker.delete(key)  # the push that was lost
    store._r.hset(store.layout.job("stalled"), "enqueued_at", time.time() - 60)
    monkeypatch.setattr(tasks.reaper, "job_store", lambda: store)
    monkeypatch.setattr(tasks.reaper, "stage_messages", lambda: messages)
    monkeypatch.setattr(tasks.resume, "stage_messages", lambda: messages)
    monkeypatch.setattr(tasks.reaper, "live_run_queues", set)
    store._r.delete(keys.STALL_SWEEP)
    assert tasks.reaper.sweep_stalled(grace_s=5) == 1
    assert waiting(broker, messages, "init") == ["stalled.init.1"]
    assert tasks.reaper.sweep_stalled(grace_s=5) == 0  # the sweep's lock spaces sweeps


def test_a_cluster_url_makes_cluster_clients_and_needs_a_broker_apart(cluster: redis.RedisCluster) -> None:
    from farm.redis_clients import broker_url, redis_client
    from farm.settings import Settings

    node = cluster.get_default_node()
    url = f"redis+cluster://{node.host}:{node.port}"
    client = redis_client(url, decode_responses=True)
    try:
        assert isinstance(client, redis.RedisCluster) and client.ping()
        assert keys.Layout(CLUSTER_BUCKETS).tags() == [f"j{n}" for n in range(16)]
    finally:
        client.close()
    with pytest.raises(ValueError, match="FARM_BROKER_URL"):
        broker_url(Settings(redis_url=url))
    assert broker_url(Settings(redis_url=url, broker_url="redis://b:6379/0")) == "redis://b:6379/0"


def test_gateway_sessions_run_on_the_cluster(cluster: redis.RedisCluster) -> None:
    """A session's keys share its id's hash tag: create, record, fail, reward, end and read back on the
    cluster (the farm-wide call counter is written apart, in its own slot)."""
    port = cluster.get_default_node().port

    async def flow() -> None:
        client = async_redis_client(f"redis+cluster://127.0.0.1:{port}")
        try:
            sessions = SessionStore(client)
            info = await sessions.create(task_id="t1")
            record = CompletionRecord(
                completion_id="c1", session_id=info.session_id, prompt_ids=[1, 2], response_ids=[3]
            )
            assert await sessions.append_completion(record) == 0
            assert await sessions.append_failure(
                record.model_copy(
                    update={"error": CallFailure(error_class="upstream", status=502, message="x")}
                )
            )
            await sessions.set_reward(info.session_id, 1.0)
            assert await sessions.end(info.session_id) == 1
            assert [c.response_ids for c in await sessions.completions(info.session_id)] == [[3]]
            assert len(await sessions.failures(info.session_id)) == 1
            assert await client.hget(keys.STATS, "gateway_calls:openai_chat") == b"1"
        finally:
            await client.aclose()

    cluster.flushall()
    asyncio.run(flow())
