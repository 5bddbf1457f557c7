"""Faults on a farm of real processes: workers killed or stopped mid-stage, duplicate deliveries,
a failing backend, a callback endpoint that is down, Redis restarted."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import httpx
import psutil
import pytest
import redis

from farm import keys
from farm.embedded_redis import EmbeddedRedis, free_port
from farm.jobs.messages import StageMessages
from farm.launcher import LocalFarm, WorkerSpec
from farm.models.results import JobResult, JobState
from tests.api.backend_server import GOOD, MisbehavingBackend
from tests.farms import temp_farm
from tests.integration.jobs import submit, wait_state
from tests.integration.task_events import TaskEvents
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # fault injection: the CI slow step


@pytest.fixture(scope="module")
def faulty_farm() -> Iterator[LocalFarm]:
    """Its own Redis (with AOF) and two run workers on one node, so one can die and one carry on."""
    server = EmbeddedRedis(appendonly=True).start()
    farm = temp_farm(
        "farm-faults-",
        redis_url=server.url,
        workers=[
            WorkerSpec("init", concurrency=4),
            WorkerSpec("run", concurrency=4),
            WorkerSpec("run", concurrency=4),
            WorkerSpec("eval", concurrency=4),
        ],
        env={"FARM_STALL_GRACE_S": "4"},
    )
    farm.redis_server = server  # type: ignore[attr-defined]
    with farm.start(timeout_s=90):
        yield farm
    server.stop()


@pytest.fixture
def fapi(faulty_farm: LocalFarm) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=faulty_farm.api_url, timeout=60) as client:
        yield client


def job_fields(farm: LocalFarm, job_id: str) -> dict[str, str]:
    client = redis.Redis.from_url(farm.redis_url, decode_responses=True)
    try:
        return client.hgetall(keys.job(job_id))
    finally:
        client.close()


def worker_holding(farm: LocalFarm, job_id: str, timeout_s: float = 10) -> str:
    """The LocalFarm name of the worker whose stage holds the job's lease now."""
    owner = wait_until(
        lambda: job_fields(farm, job_id).get("lease_owner"),
        timeout_s,
        interval_s=0.02,
        what=f"a lease on {job_id}",
    )
    label = owner.split("@")[0].rsplit("-", 2)[0]  # "run-1-<farm id>-<port>@host" -> "run-1"
    return f"worker-{label}"


def test_a_killed_run_stage_resumes_elsewhere_within_15_s(faulty_farm: LocalFarm, fapi: httpx.Client) -> None:
    job_id = submit(fapi, {"handler": "noop", "run_s": 4})
    assert wait_state(fapi, job_id, {"run"}, 10).state is JobState.run
    victim = worker_holding(faulty_farm, job_id)
    first_token = job_fields(faulty_farm, job_id)["lease_token"]
    faulty_farm.kill(victim, signal.SIGKILL)
    killed_at = time.monotonic()
    try:
        wait_until(  # the stage starts again under a new lease, on the surviving worker
            lambda: job_fields(faulty_farm, job_id),
            15,
            accept=lambda f: f.get("lease_token") not in (None, "", first_token) or f.get("state") == "done",
            interval_s=0.05,
            what="the killed stage resumed under a new lease",
        )
        resumed_after = time.monotonic() - killed_at
        result = wait_state(fapi, job_id, {"done", "failed"}, 30)
        assert result.state is JobState.done, result.error
        assert resumed_after < 15
        assert job_fields(faulty_farm, job_id)["infra_retries"] == "1"
    finally:
        faulty_farm.respawn(victim)


def send_stage(farm: LocalFarm, job_id: str, stage: str, task_id: str) -> None:
    """A stage message of the job, sent on its own (as a redelivery or a stray duplicate would be)."""
    from farm.celery_app import create_app

    celery = create_app()
    celery.conf.broker_url = farm.redis_url
    message = StageMessages(celery).build(job_id, stage, task_id, stage)
    redis.Redis.from_url(farm.redis_url).lpush(message.key, message.payload)


def test_a_duplicate_delivery_never_runs_a_stage_twice(faulty_farm: LocalFarm, fapi: httpx.Client) -> None:
    with TaskEvents(faulty_farm.redis_url, workers=len(faulty_farm.worker_names())) as events:
        job_id = submit(fapi, {"handler": "noop", "run_s": 2})
        assert wait_state(fapi, job_id, {"run"}, 10).state is JobState.run
        token = job_fields(faulty_farm, job_id)["lease_token"]
        # What a visibility-timeout redelivery would do: the same stage again while it runs.
        send_stage(faulty_farm, job_id, "run", f"{job_id}.run.dup")
        assert events.ended({f"{job_id}.run.dup"}, 10) == {f"{job_id}.run.dup": "task-succeeded"}
        assert job_fields(faulty_farm, job_id)["state"] == "run"  # it was turned away while the stage ran
        result = wait_state(fapi, job_id, {"done", "failed"}, 20)
        assert result.state is JobState.done
        assert result.timings.run == pytest.approx(2.0, abs=0.6)  # ran once, not twice
        fields = job_fields(faulty_farm, job_id)
        assert int(fields["attempt"]) == int(token) + 1  # only the eval attempt followed
        # ... and after the job ended: taken, refused at the door, nothing rewritten.
        late = {stage: f"{job_id}.{stage}.late" for stage in ("run", "eval")}
        for stage, task_id in late.items():
            send_stage(faulty_farm, job_id, stage, task_id)
        assert events.ended(set(late.values()), 10) == dict.fromkeys(late.values(), "task-succeeded")
    assert job_fields(faulty_farm, job_id) == fields


def test_sigterm_gives_the_stage_back_and_the_worker_exits_promptly(
    faulty_farm: LocalFarm, fapi: httpx.Client
) -> None:
    job_id = submit(fapi, {"handler": "noop", "run_s": 30})
    assert wait_state(fapi, job_id, {"run"}, 10).state is JobState.run
    victim = worker_holding(faulty_farm, job_id)
    faulty_farm.kill(victim, signal.SIGTERM)
    try:
        faulty_farm.child(victim).wait(10)  # does not wait for the 30 s stage
        wait_until(
            lambda: job_fields(faulty_farm, job_id).get("infra_retries") == "1",
            10,
            interval_s=0.05,
            what="the stage given back",
        )
        assert worker_holding(faulty_farm, job_id) != victim
        fapi.post("/cancel", json={"job_id": job_id})
        assert wait_state(fapi, job_id, {"cancelled"}, 5).state is JobState.cancelled
    finally:
        faulty_farm.respawn(victim)


def test_a_failing_backend_is_marked_unhealthy_and_the_call_retried(
    faulty_farm: LocalFarm, fapi: httpx.Client
) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    fapi.post("/clear_llm_server").raise_for_status()
    fapi.post("/add_llm_server", json={"address": dead}).raise_for_status()  # first: picked first
    for url in faulty_farm.llm_urls:
        fapi.post("/add_llm_server", json={"address": url}).raise_for_status()
    try:
        result = JobResult.model_validate(
            fapi.post("/process", json={"instance": {"handler": "noop", "generate_tokens": 4}}).json()
        )
        assert result.state is JobState.done, result.error
        assert result.artifacts["backend"] in faulty_farm.llm_urls
        listed = {b["address"]: b["healthy"] for b in fapi.get("/llm_servers").json()}
        assert listed[dead] is False
    finally:
        fapi.post("/clear_llm_server")
        for url in faulty_farm.llm_urls:
            fapi.post("/add_llm_server", json={"address": url})


class _FlakyReceiver(BaseHTTPRequestHandler):
    down_for = 2
    seen: list[dict] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        type(self).seen.append(body)
        self.send_response(503 if len(type(self).seen) <= type(self).down_for else 200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_a_callback_that_is_down_is_retried_while_the_result_stays_readable(fapi: httpx.Client) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FlakyReceiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/results"
        job_id = submit(fapi, {"handler": "noop"}, callback_url=url)
        assert wait_state(fapi, job_id, {"done"}, 10).state is JobState.done  # readable meanwhile
        wait_until(lambda: len(_FlakyReceiver.seen) >= 3, 20, interval_s=0.05, what="three deliveries")
        assert [b["job_id"] for b in _FlakyReceiver.seen] == [job_id] * 3
        assert JobResult.model_validate(_FlakyReceiver.seen[-1]).state is JobState.done
    finally:
        server.shutdown()


def kill_the_init_worker(farm: LocalFarm) -> None:
    """SIGKILL the only init worker, then wait until Redis has dropped its connections: until then its
    blocked BRPOP would take the next message off the queue, into a dead process."""
    worker = psutil.Process(farm.child("worker-init-0").pid)
    redis_port = urlsplit(farm.redis_url).port
    ports = {
        c.laddr.port
        for p in [worker, *worker.children(recursive=True)]
        for c in p.net_connections("tcp")
        if c.raddr and c.raddr.port == redis_port
    }
    assert ports, "the init worker holds no Redis connection"
    farm.kill("worker-init-0", signal.SIGKILL)
    farm.child("worker-init-0").wait(10)
    client = redis.Redis.from_url(farm.redis_url)
    try:
        wait_until(
            lambda: {int(c["addr"].rsplit(":", 1)[1]) for c in client.client_list()} & ports,
            10,
            accept=lambda left: not left,
            interval_s=0.02,
            what="Redis to drop the dead worker's connections",
        )
    finally:
        client.close()


TAKE_AND_DIE = """
import os, sys
from kombu import Connection
with Connection(sys.argv[1]) as conn:
    queue = conn.SimpleQueue("init")
    message = queue.get(block=True, timeout=20)
    print(message.headers["id"], flush=True)
    os._exit(0)  # dies holding the message, unacknowledged
"""


def test_a_message_taken_by_a_worker_that_died_before_starting_it_is_sent_again(
    faulty_farm: LocalFarm, fapi: httpx.Client
) -> None:
    # The only init worker goes away (a worker with a pending BRPOP would take the message first).
    kill_the_init_worker(faulty_farm)
    try:
        job_id = submit(fapi, {"handler": "noop"})
        command = [sys.executable, "-c", TAKE_AND_DIE, faulty_farm.redis_url]
        taker = subprocess.run(command, capture_output=True, text=True, timeout=30)
        assert taker.stdout.strip() == f"{job_id}.init", taker.stderr
    finally:
        faulty_farm.respawn("worker-init-0")
    result = wait_state(fapi, job_id, {"done", "failed"}, 30)
    assert result.state is JobState.done, result.error
    assert job_fields(faulty_farm, job_id)["infra_retries"] == "1"


def test_a_job_whose_stage_was_never_sent_is_sent_by_the_sweep(
    faulty_farm: LocalFarm, fapi: httpx.Client
) -> None:
    """A job waiting for a stage whose message is nowhere: what a reaper (or a draining worker) killed
    between taking a lost stage's lease and sending the stage again leaves behind. Recording a job and
    ending a stage enqueue the next message in the same step, so only these paths have such a window."""
    from farm.jobs.dispatch import stage_task_ids
    from farm.jobs.messages import QueuedMessage
    from farm.jobs.spec import JobSpec
    from farm.jobs.store import JobStore

    store = JobStore(redis.Redis.from_url(faulty_farm.redis_url), ttl_s=3600)
    job_id = f"unsent-{uuid.uuid4().hex[:8]}"
    spec = JobSpec(job_id=job_id, handler="noop", instance={"handler": "noop"}, timeout_s=60)
    nowhere = QueuedMessage(key="nobody-reads-this", payload="{}")
    assert store.create(spec, stage_task_ids(job_id), nowhere)  # recorded, its stage never sent
    result = wait_state(fapi, job_id, {"done", "failed"}, 30)
    assert result.state is JobState.done, result.error
    assert job_fields(faulty_farm, job_id)["infra_retries"] == "1"


def test_a_message_lost_in_delivery_is_sent_again(faulty_farm: LocalFarm, fapi: httpx.Client) -> None:
    """The window kombu cannot cover: a worker took the message off the queue (BRPOP) and died before
    recording the delivery, so the message is in no queue and not among the unacknowledged."""
    kill_the_init_worker(faulty_farm)
    client = redis.Redis.from_url(faulty_farm.redis_url)
    try:
        job_id = submit(fapi, {"handler": "noop"})
        # kombu keeps one list per priority step: "init", then "init\x06\x16<step>"
        queued = [(name, raw) for name in client.keys("init*") for raw in client.lrange(name, 0, -1)]
        for name, raw in queued:
            message = json.loads(raw)
            if message["headers"]["id"] == f"{job_id}.init":
                assert client.lrem(name, 1, raw) == 1  # gone, as in the lost delivery
                break
        else:
            raise AssertionError("the job's init message was not queued")
    finally:
        faulty_farm.respawn("worker-init-0")
        client.close()
    result = wait_state(fapi, job_id, {"done", "failed"}, 30)
    assert result.state is JobState.done, result.error
    assert job_fields(faulty_farm, job_id)["infra_retries"] == "1"


def _only_backend(fapi: httpx.Client, url: str) -> None:
    fapi.post("/clear_llm_server").raise_for_status()
    fapi.post("/add_llm_server", json={"address": url}).raise_for_status()


def test_cancel_interrupts_a_backend_call_in_flight(faulty_farm: LocalFarm, fapi: httpx.Client) -> None:
    """A backend dripping its answer a byte every 0.3 s (a minute for the whole reply): cancel ends
    the job within a second, and the worker lets go of the backend too."""
    with MisbehavingBackend() as backend:
        backend.behaviour.mode, backend.behaviour.reply, backend.behaviour.drip_s = "drip", GOOD, 0.3
        _only_backend(fapi, backend.url)
        try:
            job_id = submit(fapi, {"handler": "noop", "generate_tokens": 2})
            wait_until(lambda: backend.behaviour.open_calls > 0, 20, what="the job calling the backend")
            cancelled_at = time.monotonic()
            fapi.post("/cancel", json={"job_id": job_id}).raise_for_status()
            assert wait_state(fapi, job_id, {"cancelled"}, 1.0).state is JobState.cancelled
            wait_until(lambda: backend.behaviour.open_calls == 0, 1.5, what="the abandoned call to end")
            assert time.monotonic() - cancelled_at < 2.0
        finally:
            _restore_backends(faulty_farm, fapi)


def test_a_hanging_backend_cannot_outlive_the_job_budget(faulty_farm: LocalFarm, fapi: httpx.Client) -> None:
    with MisbehavingBackend() as backend:
        backend.behaviour.mode = "hang"
        _only_backend(fapi, backend.url)
        try:
            job_id = submit(fapi, {"handler": "noop", "generate_tokens": 2}, timeout_s=2)
            wait_until(lambda: backend.behaviour.calls > 0, 20, what="the job calling the backend")
            result = wait_state(fapi, job_id, {"timeout", "failed", "done"}, 3.0)
            assert result.state is JobState.timeout, result.error
            listed = {b["address"]: b["healthy"] for b in fapi.get("/llm_servers").json()}
            assert listed[backend.url] is True  # the job's budget ran out, not the backend
        finally:
            _restore_backends(faulty_farm, fapi)


def test_a_backend_breaking_the_protocol_is_a_classified_failure(
    faulty_farm: LocalFarm, fapi: httpx.Client
) -> None:
    with MisbehavingBackend() as backend:
        backend.behaviour.reply = {"choices": "lol"}
        _only_backend(fapi, backend.url)
        try:
            job_id = submit(fapi, {"handler": "noop", "generate_tokens": 2})
            result = wait_state(fapi, job_id, {"failed", "done"}, 20)
            assert result.state is JobState.failed and result.error is not None
            assert result.error.type == "BadBackendResponse", result.error
            assert not result.trajectory.traces
            assert fapi.get(f"/jobs/{job_id}").status_code == 200
        finally:
            _restore_backends(faulty_farm, fapi)


def _restore_backends(farm: LocalFarm, fapi: httpx.Client) -> None:
    fapi.post("/clear_llm_server")
    for url in farm.llm_urls:
        fapi.post("/add_llm_server", json={"address": url})
