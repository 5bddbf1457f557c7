"""The farm's Redis schema in one place: every key and every field of a job's hash. All keys share
the `farm:` prefix; no other module spells one (tests/core/test_key_literals.py).

Jobs are spread over hash-tag buckets `{j0}`, `{j1}`, ...: a job's hash and every index a job script
touches (active set, state counts, leases, revocations, stage statistics, callbacks) carry the tag of
the job's bucket, so each job script's keys lie in one Redis Cluster slot. A plain Redis uses one
bucket (`{j0}`); a cluster CLUSTER_BUCKETS (farm/redis_clients.py: FARM_REDIS_URL `redis+cluster://`).
Readers of a farm-wide view (/status, sweeps, metrics) go through every bucket (`Layout.tags`).

Jobs (one hash per job, TTL = settings.result_ttl_s):
    farm:{jK}:job:{job_id}       hash  fields: JobField below
Job indexes, one of each per bucket {jK}:
    farm:{jK}:active             set   job ids not yet terminal
    farm:{jK}:by_state           hash  "from>to" -> state changes made; jobs per state, finished jobs
                                       and stage runs are derived from it (farm/jobs/store.py)
    farm:{jK}:leases             zset  job id -> expiry of the lease of its running stage
    farm:{jK}:revoked            zset  job id -> time cancellation was asked (pruned after REVOKED_KEEP_S)
    farm:{jK}:stats              hash  stage_seconds_sum:{stage}, retries_total:infra
    farm:{jK}:callbacks          zset  job id -> when its result should next be POSTed to callback_url
Farm-wide:
    farm:jobs:index              zset  job id -> created_at, every job within the result TTL (the viewer)
    farm:done                    pubsub channel; a job id is published when it turns terminal
    farm:callbacks:due           pubsub channel; the id of a job with a callback_url that turned terminal
    farm:stats                   hash  counters written outside job scripts: gateway_calls:{provider}
Tasks (task API; one hash tag: a task is recorded with its index entry in one script):
    farm:{tasks}:task:{task_id}  hash  request, session_ids, created_at
    farm:{tasks}                 zset  task id -> created_at; entries past the result TTL are dropped
                                       at each submission
Backend pool (one hash tag: the pool's scripts touch its keys and a pin together):
    farm:{backends}              hash  address -> JSON {kind, weight, gen, order}
    farm:{backends}:assigned     zset  address -> jobs/sessions currently pinned to it
    farm:{backends}:inflight     hash  address -> LLM calls in flight
    farm:{backends}:unhealthy    set   addresses that failed and are skipped until a probe succeeds
    farm:{backends}:seq          counter giving each added backend a generation
    farm:{backends}:sticky:{key} string "address|gen" a job or gateway session is pinned to
Gateway sessions (farm/gateway/sessions.py; each session's keys share its id as their hash tag):
    farm:gateway:session:{<sid>} hash  info, state, ended_at; and :completions list, :ids set (the
                                       completion ids logged), :rewards hash, :failed list (SessionKeys)
Service:
    farm:accepting               string "0" after /stop; absent or "1" means new work is accepted
    farm:{workers}               zset  hostname -> when its registration expires (heartbeats push it on)
    farm:{workers}:info          hash  hostname -> JSON {node, queues, pid, host, concurrency}
                                       (one tag: registration writes both in one transaction)
    farm:draining:{hostname}     string set while that worker shuts down (its stages give their work back)
    farm:ready:{node}            zset  job ids holding a READY slot on that node (score = taken at): init
                                       running or done there, run not started yet; bounded by
                                       FARM_READY_BUFFER. The job hash's `ready_node` names the set.
    farm:orphan_sweep:{host}     string lock: one worker per host looks for orphaned sandboxes
    farm:stall_sweep             string lock: one worker at a time looks for stalled jobs
    farm:reaper                  string lease (3 s, LEAD_S): the one worker whose reaper thread leads
    farm:demo:claim              string set in the database a demo took for itself (farm/demo.py)
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

PREFIX = "farm:"
CLUSTER_BUCKETS = 16
"""Hash-tag buckets of jobs on a Redis Cluster: enough to spread over a few masters, few enough that
a sweep or /status reads every bucket's index cheaply."""

JOBS_INDEX = "farm:jobs:index"
DONE_CHANNEL = "farm:done"
CALLBACKS_DUE_CHANNEL = "farm:callbacks:due"
STATS = "farm:stats"
TOOL_CALL_MISSES = "tool_call_misses:"
"""STATS field prefix: assistant turns whose tool calls the selected parser could not read, per parser."""
TOOL_CALL_FLAGGED = "tool_call_flagged:"
"""STATS field prefix: episodes flagged because every turn was such a miss, per parser."""
TOOL_CALL_PARSE = "tool_call_parse:"
"""STATS field prefix: assistant turns per `{family}|{parser}|{outcome}` (farm/agent/parse_outcomes.py)."""
INFRA_FAILURES = "infra_failures:"
"""Job-bucket STATS field prefix: jobs that ended with an infrastructure failure, per class."""
STALE_SAMPLES = "stale_samples:"
"""STATS field prefix: samples the trainers' consumers withheld or discarded at assembly (reported)."""
OFFPOLICY = "farm:offpolicy"
"""Hash: run id -> the last off-policy lag its consumer reported (POST /metrics/offpolicy)."""
TASKS = "farm:{tasks}"
OPEN_GROUPS = "farm:{tasks}:groups"
"""Tasks whose group is not delivered yet (farm/api/groups.py settles them), scored by submission time."""
BACKENDS = "farm:{backends}"
BACKENDS_ASSIGNED = "farm:{backends}:assigned"
BACKENDS_INFLIGHT = "farm:{backends}:inflight"
BACKENDS_UNHEALTHY = "farm:{backends}:unhealthy"
BACKENDS_ERRORS = "farm:{backends}:errors"
"""Address -> why the backend is unhealthy (its last probe's or call's error), while it is."""
BACKENDS_SEQ = "farm:{backends}:seq"
GATEWAY_SESSIONS = "farm:gateway:session"
ACCEPTING = "farm:accepting"
STALL_SWEEP = "farm:stall_sweep"
WORKERS = "farm:{workers}"
WORKERS_INFO = "farm:{workers}:info"
REAPER = "farm:reaper"
DEMO_CLAIM = "farm:demo:claim"


class JobField:
    """The fields of a job's hash (`farm:{jK}:job:{id}`); the Lua scripts use exactly these
    (tests/core/test_key_literals.py checks every quoted name in farm/jobs/scripts.py). Only farm/jobs/
    reads or writes them (farm/jobs/record.py: each one's encoding); the rest of the farm uses its objects."""

    SPEC: Final = "spec"
    TASK_IDS: Final = "task_ids"
    STATE: Final = "state"
    CREATED_AT: Final = "created_at"
    ENQUEUED_AT: Final = "enqueued_at"
    """When the job was last put in a queue; cleared when a stage starts (its wait goes to t_queued)."""
    TIMEOUT_S: Final = "timeout_s"
    ATTEMPT: Final = "attempt"
    """The fencing counter: incremented whenever a stage is taken or a lease reaped."""
    CALLBACK_URL: Final = "callback_url"
    T_QUEUED: Final = "t_queued"
    LEASE_TOKEN: Final = "lease_token"
    LEASE_EXPIRES: Final = "lease_expires"
    LEASE_OWNER: Final = "lease_owner"
    LEASE_STAGE: Final = "lease_stage"
    LEASE_STARTED: Final = "lease_started"
    REVOKED: Final = "revoked"
    """"1" once cancellation was asked (also in the bucket's revoked set, which running stages poll)."""
    READY_NODE: Final = "ready_node"
    NODE: Final = "node"
    """The node whose init made the job's sandbox (its run goes there)."""
    RUN_NODE: Final = "run_node"
    INIT_STATE: Final = "init_state"
    RUN_OUTPUT: Final = "run_output"
    INFRA_RETRIES: Final = "infra_retries"
    RESULT: Final = "result"
    FINISHED_AT: Final = "finished_at"
    BACKEND_PINNED: Final = "backend_pinned"
    CALLBACK_ATTEMPTS: Final = "callback_attempts"
    CALLBACK_STATE: Final = "callback_state"
    CALLBACK_ERROR: Final = "callback_error"
    STAGE_TIME_PREFIX: Final = "t_"
    STAGE_DONE_PREFIX: Final = "done:"

    @staticmethod
    def stage_time(stage: str) -> str:
        """Seconds spent in `stage` so far (`t_init`, `t_run`, `t_eval`)."""
        return f"{JobField.STAGE_TIME_PREFIX}{stage}"

    @staticmethod
    def stage_done(stage: str) -> str:
        """ "1" once `stage` handed off (`done:init`, ...)."""
        return f"{JobField.STAGE_DONE_PREFIX}{stage}"

    @classmethod
    def names(cls) -> set[str]:
        return {v for k, v in vars(cls).items() if k.isupper() and isinstance(v, str)}


@dataclass(frozen=True)
class JobKeys:
    """Every key a job script may touch, all in the job's bucket."""

    job: str
    active: str
    by_state: str
    leases: str
    revoked: str
    stats: str
    callbacks: str


@dataclass(frozen=True)
class Layout:
    """How jobs are spread over hash-tag buckets: one on a plain Redis, CLUSTER_BUCKETS on a cluster."""

    buckets: int = 1

    def tag(self, job_id: str) -> str:
        if self.buckets == 1:
            return "j0"
        return f"j{zlib.crc32(job_id.encode()) % self.buckets}"

    def tags(self) -> list[str]:
        return [f"j{n}" for n in range(self.buckets)]

    def job(self, job_id: str) -> str:
        return f"farm:{{{self.tag(job_id)}}}:job:{job_id}"

    def job_keys(self, job_id: str) -> JobKeys:
        tag = self.tag(job_id)
        return JobKeys(
            job=self.job(job_id),
            active=active(tag),
            by_state=by_state(tag),
            leases=leases(tag),
            revoked=revoked(tag),
            stats=job_stats(tag),
            callbacks=callbacks(tag),
        )


def _key(head: str, tail: str = "") -> Callable[[str], str]:
    """The maker of a kind of key that differs by one part (a bucket's tag, an id, a name)."""

    def key(part: str) -> str:
        return head + part + tail

    return key


# A bucket's job indexes, given the bucket's tag.
active = _key("farm:{", "}:active")
by_state = _key("farm:{", "}:by_state")
leases = _key("farm:{", "}:leases")
revoked = _key("farm:{", "}:revoked")
job_stats = _key("farm:{", "}:stats")
callbacks = _key("farm:{", "}:callbacks")


_layout: Layout | None = None


def layout() -> Layout:
    """This process's layout, from FARM_REDIS_URL (a cluster URL spreads jobs over buckets)."""
    global _layout
    if _layout is None:
        from farm.settings import get_settings, is_cluster_url

        _layout = Layout(CLUSTER_BUCKETS if is_cluster_url(get_settings().redis_url) else 1)
    return _layout


def use_layout(new: Layout | None) -> None:
    """Sets this process's layout (None: read it from the settings again at next use)."""
    global _layout
    _layout = new


def job(job_id: str) -> str:
    return layout().job(job_id)


@dataclass(frozen=True)
class SessionKeys:
    """A gateway session's keys, tagged with its id (one cluster slot)."""

    info: str
    completions: str
    ids: str
    rewards: str
    failed: str


def session(sid: str) -> SessionKeys:
    base = f"{GATEWAY_SESSIONS}:{{{sid}}}"
    return SessionKeys(base, f"{base}:completions", f"{base}:ids", f"{base}:rewards", f"{base}:failed")


task = _key("farm:{tasks}:task:")
sticky = _key("farm:{backends}:sticky:")
ready = _key("farm:ready:")
draining = _key("farm:draining:")
orphan_sweep = _key("farm:orphan_sweep:")
