"""The job-state Lua scripts (farm/jobs/scripts.py) in-process against a real redis-server: milliseconds
per test, no workers. Whole-farm behaviour is covered by tests/integration; these pin the transitions."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from farm import keys
from farm.embedded_redis import EmbeddedRedis
from farm.jobs.messages import QueuedMessage
from farm.jobs.spec import JobSpec
from farm.jobs.store import LEASE_TTL_S, JobStore, StageHandoff, terminal_result
from farm.jobs.tally import derived_stats, transitions
from farm.keys import JobField
from farm.models.results import JobState, StageError

NEXT = {"init": "q:run", "run": "q:eval", "eval": "q:none"}
BUCKET = keys.Layout().job_keys("")
"""The indexes of the one bucket of a plain Redis."""


@pytest.fixture
def store(redis_client: redis.Redis) -> Iterator[JobStore]:
    yield JobStore(redis_client, ttl_s=3600)


def create(store: JobStore, job_id: str = "j1", timeout_s: float = 60.0, callback: str | None = None) -> None:
    spec = JobSpec(job_id=job_id, handler="noop", instance={}, timeout_s=timeout_s, callback_url=callback)
    assert store.create(spec, {"init": f"{job_id}.init"}, QueuedMessage("q:init", f"init {job_id}"))


def end(store: JobStore, job_id: str, stage: str, token: int, handoff: StageHandoff | None = None) -> bool:
    message = QueuedMessage(NEXT[stage], f"{stage}-next {job_id}")
    return store.end_stage(job_id, token, stage, 0.5, message, handoff)


def test_create_is_idempotent_and_enqueues_once(store: JobStore) -> None:
    create(store)
    spec = JobSpec(job_id="j1", handler="noop", instance={}, timeout_s=1)
    assert not store.create(spec, {}, QueuedMessage("q:init", "again"))
    assert store._r.lrange("q:init", 0, -1) == ["init j1"]
    assert store.counts_by_state() == {"queued": 1}
    assert store._r.sismember(BUCKET.active, "j1")


def test_begin_takes_the_lease_and_counts_queue_time(store: JobStore) -> None:
    create(store)
    store._r.hset(keys.job("j1"), "enqueued_at", time.time() - 2)
    verdict, record, token = store.begin_stage("j1", "init", "w1")
    assert (verdict, token) == ("go", 1)
    assert record is not None and record.state == JobState.init
    assert record.fields["lease_owner"] == "w1" and not record.fields["enqueued_at"]
    assert record.timings().queued >= 2
    stored = store._r.hgetall(keys.job("j1"))
    assert stored == record.fields  # what the script returns is what it wrote
    assert stored["state"] == "init" and stored["lease_token"] == "1"
    assert store._r.zscore(BUCKET.leases, "j1") == pytest.approx(time.time() + LEASE_TTL_S, abs=1)
    assert store._r.hgetall(BUCKET.by_state) == {"queued>init": "1"}  # one write per state change
    assert store.counts_by_state() == {"init": 1}
    # A second delivery while the lease is live is refused at the door.
    assert store.begin_stage("j1", "init", "w2")[0] == "leased"


def test_end_stage_is_fenced_and_hands_off(store: JobStore) -> None:
    create(store)
    _, _, token = store.begin_stage("j1", "init", "w1")
    assert not end(store, "j1", "init", token + 1)
    assert store._r.llen("q:run") == 0
    assert end(store, "j1", "init", token, StageHandoff("n1", init_state={"sandbox": {"id": "s1"}}))
    assert store._r.lrange("q:run", 0, -1) == ["init-next j1"]
    record = store.get("j1")
    assert record is not None and record.stage_done("init") and record.init_state == {"sandbox": {"id": "s1"}}
    assert not record.fields["lease_token"] and store._r.zscore(BUCKET.leases, "j1") is None
    assert record.timings().init == pytest.approx(0.5)
    assert store.begin_stage("j1", "init", "w1")[0] == "done"  # a redelivery of a finished stage


def test_run_start_gives_the_ready_slot_back(store: JobStore) -> None:
    create(store)
    _, _, token = store.begin_stage("j1", "init", "w1")
    assert store.take_ready_slot("j1", "n1", limit=1)
    create(store, "j2")
    assert not store.take_ready_slot("j2", "n1", limit=1)  # the node is full
    end(store, "j1", "init", token)
    verdict, record, _ = store.begin_stage("j1", "run", "w1")
    assert verdict == "go" and record is not None and not record.fields["ready_node"]
    assert store._r.zcard(keys.ready("n1")) == 0
    assert store.take_ready_slot("j2", "n1", limit=1)


def test_revoked_expired_and_missing(store: JobStore) -> None:
    assert store.begin_stage("nope", "init", "w")[0] == "missing"
    create(store, "r1")
    store.revoke("r1")
    verdict, record, token = store.begin_stage("r1", "init", "w")
    assert (verdict, token) == ("revoked", 0) and record is not None
    create(store, "t1", timeout_s=1)
    store._r.hset(keys.job("t1"), "t_init", 1.5)
    assert store.begin_stage("t1", "init", "w")[0] == "expired"


def test_reap_fences_the_lost_attempt(store: JobStore) -> None:
    create(store)
    _, _, token = store.begin_stage("j1", "init", "w1")
    store._r.zadd(BUCKET.leases, {"j1": 0})
    store._r.hset(keys.job("j1"), "lease_expires", 0)
    reaped = store.reap()
    assert [(r.job_id, r.stage, r.infra_retries) for r in reaped] == [("j1", "init", 1)]
    assert not end(store, "j1", "init", token)  # the presumed-dead attempt cannot write
    verdict, _, retry_token = store.begin_stage("j1", "init", "w2")
    assert verdict == "go" and retry_token > token


def test_finalize_once_publishes_and_schedules_callback(store: JobStore) -> None:
    create(store, callback="http://127.0.0.1:9/cb")
    _, record, token = store.begin_stage("j1", "init", "w1")
    assert record is not None
    end(store, "j1", "init", token, StageHandoff("n1", init_state={"x": 1}))
    _, record, token = store.begin_stage("j1", "run", "w1")
    assert record is not None
    listener = store._r.pubsub(ignore_subscribe_messages=True)
    listener.subscribe(keys.DONE_CHANNEL, keys.CALLBACKS_DUE_CHANNEL)
    result = terminal_result(record, JobState.failed, StageError(stage="run", type="x", message="boom"))
    assert not store.finalize(result, token=token + 5)
    assert store.finalize(result, token=token)
    assert not store.finalize(result, token=token)
    messages = [listener.get_message(timeout=1) for _ in range(4)]  # two of them confirm the subscriptions
    assert {(m["channel"], m["data"]) for m in messages if m} == {
        (keys.CALLBACKS_DUE_CHANNEL, "j1"),  # wakes the callback sender (jobs without one do not)
        (keys.DONE_CHANNEL, "j1"),
    }
    stored = store._r.hgetall(keys.job("j1"))
    assert stored["state"] == "failed" and json.loads(stored["result"])["error"]["message"] == "boom"
    assert not stored["init_state"] and not stored["lease_token"]  # kept once, in the result
    assert store._r.zscore(BUCKET.callbacks, "j1") is not None
    assert not store._r.sismember(BUCKET.active, "j1")
    assert store.counts_by_state() == {"failed": 1}
    assert 0 < store._r.ttl(keys.job("j1")) <= 3600
    # The stage that ended the job is counted like one that handed off (metrics see every stage).
    made = transitions([store._r.hgetall(BUCKET.by_state)])
    stats = derived_stats(made, store.counts_by_state())
    assert stats["stage_count:run"] == stats["stage_count:init"] == 1 and stats["stage_count:eval"] == 0
    assert stats["jobs_total:failed"] == 1
    assert float(store._r.hget(BUCKET.stats, "stage_seconds_sum:run")) >= 0


def test_release_gives_the_stage_back(store: JobStore) -> None:
    create(store)
    _, _, token = store.begin_stage("j1", "init", "w1")
    assert store.release("j1", token, restart_from_init=True) == 1
    assert store.release("j1", token, restart_from_init=True) == 0
    verdict, _, again = store.begin_stage("j1", "init", "w2")
    assert verdict == "go" and again == token + 1


def test_job_scripts_cost_few_commands() -> None:
    """The stage hand-off's Redis cost (commands inside scripts count in INFO commandstats), on a
    server of its own: nothing else may talk to it while it counts."""
    server = EmbeddedRedis().start()
    try:
        count_commands(JobStore(redis.Redis.from_url(server.url, decode_responses=True), ttl_s=3600))
    finally:
        server.stop()


def count_commands(store: JobStore) -> None:
    store._r.config_resetstat()
    for n in range(10):
        job_id = f"c{n}"
        create(store, job_id)
        for stage in ("init", "run", "eval"):
            _, record, token = store.begin_stage(job_id, stage, "w")
            if stage == "eval":
                assert record is not None
                assert store.finalize(terminal_result(record, JobState.done), token=token)
            else:
                assert end(store, job_id, stage, token)
    stats = store._r.info("commandstats")
    calls = sum(v["calls"] for k, v in stats.items() if k not in ("cmdstat_config", "cmdstat_info"))
    print(f"{calls / 10:.1f} commands per job", {k: v["calls"] for k, v in stats.items()})
    assert calls / 10 <= 45, stats  # 43.8 measured (62.8 before one write per state change, 116 before that)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(st.sampled_from(["a-end", "b-end", "reap", "b-begin", "a-finalize", "b-finalize"]), max_size=8)
)
def test_at_most_one_attempt_ever_writes(store: JobStore, steps: list[str]) -> None:
    """Two attempts of the same stage and the reaper in any order: an end or finalize lands only for the
    attempt holding the lease, and the job ends at most once."""
    store._r.flushdb()
    create(store)
    _, record, a = store.begin_stage("j1", "init", "wa")
    assert record is not None
    tokens = {"a": a, "b": None}
    landed: list[str] = []
    for step in steps:
        who, action = step.split("-") if "-" in step else ("", step)
        if action == "reap":
            store._r.hset(keys.job("j1"), "lease_expires", 0)
            store._r.zadd(BUCKET.leases, {"j1": 0})
            store.reap()
        elif action == "begin":
            verdict, _, token = store.begin_stage("j1", "init", "wb")
            if verdict == "go":
                tokens["b"] = token
        elif tokens[who] is not None:
            holder = store._r.hget(keys.job("j1"), "lease_token")
            if action == "end":
                ok = end(store, "j1", "init", tokens[who])
            else:
                ok = store.finalize(terminal_result(record, JobState.failed), token=tokens[who])
            assert ok == (holder == str(tokens[who]))
            if ok:
                landed.append(step)
    assert sum(1 for s in landed if s.endswith("finalize")) <= 1
    assert store._r.llen("q:run") == sum(1 for s in landed if s.endswith("end"))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["j1", "j2", "j3"]),
            st.sampled_from(["begin", "end", "finalize", "cancel", "reap", "release", "restart"]),
        ),
        max_size=25,
    )
)
def test_counts_by_state_match_the_jobs_whatever_happens(
    store: JobStore, steps: list[tuple[str, str]]
) -> None:
    """Jobs per state are derived from the state changes the scripts count (one HINCRBY each): after any
    mix of stage starts and ends, reaps, releases, restarts and ends they equal the jobs' own states."""
    store._r.flushdb()
    for job_id in ("j1", "j2", "j3"):
        create(store, job_id)
    tokens: dict[str, int] = {}
    for job_id, action in steps:
        record = store.get(job_id)
        assert record is not None
        stage = next((s for s in ("init", "run", "eval") if not record.stage_done(s)), "eval")
        if action == "begin":
            verdict, _, token = store.begin_stage(job_id, stage, "w")
            if verdict == "go":
                tokens[job_id] = token
        elif action == "end" and job_id in tokens and stage != "eval":
            end(store, job_id, stage, tokens[job_id])
        elif action == "finalize":
            store.finalize(terminal_result(record, JobState.failed), token=tokens.get(job_id))
        elif action == "cancel":
            store.finalize(terminal_result(record, JobState.cancelled), only_from="queued")
        elif action == "reap":
            store._r.hset(keys.job(job_id), "lease_expires", 0)
            store._r.zadd(BUCKET.leases, {job_id: 0})
            store.reap()
        elif action in ("release", "restart") and job_id in tokens:
            store.release(job_id, tokens[job_id], restart_from_init=action == "restart")
    truth: dict[str, int] = {}
    for job_id in ("j1", "j2", "j3"):
        state = store._r.hget(keys.job(job_id), "state")
        truth[state] = truth.get(state, 0) + 1
    assert store.counts_by_state() == truth


def test_a_full_ready_set_drops_members_that_no_longer_hold_a_slot(store: JobStore) -> None:
    """A worker that died between a script ending a job's hold and removing the member leaves a stale
    member; a node that looks full clears those (a member too young to have recorded it stays)."""
    create(store, "gone")
    create(store, "fresh")
    create(store, "waiting")
    ready = keys.ready("n1")
    store._r.zadd(ready, {"gone": time.time() - 60, "fresh": time.time()})
    store._r.hset(keys.job("gone"), "ready_node", "")  # its hold ended, the member stayed
    assert store.take_ready_slot("waiting", "n1", limit=2)
    assert set(store._r.zrange(ready, 0, -1)) == {"fresh", "waiting"}
    assert not store.take_ready_slot("gone", "n1", limit=2)  # full; checked again only after a while


def test_writes_outside_the_stage_scripts_never_recreate_a_vanished_job(store: JobStore) -> None:
    """A pin taken, a READY node, queued time, an infra retry: each reaches a live job and leaves a job
    that expired or was deleted meanwhile gone (it used to come back as a stub hash without a TTL)."""
    create(store)
    job = store.keys("j1").job
    assert store.mark_pinned("j1")
    store.add_queued_time("j1", 0.25)
    assert store.count_infra_retry("j1") == 1
    assert store.take_ready_slot("j1", "n1", limit=2)
    fields = store._r.hgetall(job)
    assert fields[JobField.BACKEND_PINNED] == "1" and fields[JobField.READY_NODE] == "n1"
    assert float(fields[JobField.T_QUEUED]) == 0.25 and fields[JobField.INFRA_RETRIES] == "1"
    assert store._r.ttl(job) > 0

    store._r.delete(job)
    assert not store.mark_pinned("j1")
    store.add_queued_time("j1", 0.25)
    assert store.count_infra_retry("j1") == -1
    store._r.delete(keys.ready("n2"))
    store.take_ready_slot("j1", "n2", limit=2)
    assert not store._r.exists(job)
    assert store._r.hget(BUCKET.stats, "retries_total:infra") == "1"  # the gone job's retry not counted


def test_renew_extends_the_leases_still_held_and_names_the_lost(store: JobStore) -> None:
    for job_id in ("a", "b", "c"):
        create(store, job_id)
    tokens = {job_id: store.begin_stage(job_id, "init", "w1")[2] for job_id in ("a", "b", "c")}
    before = {job_id: store._r.zscore(BUCKET.leases, job_id) for job_id in tokens}
    assert end(store, "c", "init", tokens["c"])  # c's stage ended: its lease was given back
    time.sleep(0.01)  # so that a renewed expiry is later than the first one
    lost = store.renew({"a": tokens["a"], "b": tokens["b"] + 1, "c": tokens["c"], "gone": 7})
    assert lost == {"b", "c", "gone"}
    assert store._r.zscore(BUCKET.leases, "a") > before["a"]
    assert store._r.zscore(BUCKET.leases, "b") == before["b"]  # a stale token renews nothing
    renewed = float(store._r.hget(store.keys("a").job, JobField.LEASE_EXPIRES))
    assert renewed == store._r.zscore(BUCKET.leases, "a")
    assert store.renew({}) == set()
