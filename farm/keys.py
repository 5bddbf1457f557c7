"""Every Redis key the farm writes, in one place. All keys share the `farm:` prefix.

Jobs (one hash per job, TTL = settings.result_ttl_s):
    farm:job:{job_id}            hash  spec, state, task_ids, node, stage outputs, timings, result
Job indexes:
    farm:jobs:active             set   job ids not yet terminal
    farm:jobs:by_state           hash  state -> number of jobs currently in it (terminal states count up)
    farm:jobs:index              zset  job id -> created_at, every job within the result TTL (the viewer)
    farm:revoked                 zset  job id -> time cancellation was asked (pruned after the result TTL)
    farm:leases                  zset  job id -> expiry of the lease of its running stage
    farm:callbacks               zset  job id -> when its result should next be POSTed to callback_url
    farm:done                    pubsub channel; a job id is published when it turns terminal
Tasks (task API):
    farm:task:{task_id}          hash  request, session_ids, created_at
    farm:tasks                   zset  task id -> created_at
Backend pool:
    farm:backends                hash  address -> JSON {kind, weight, gen, order}
    farm:backends:assigned       zset  address -> jobs/sessions currently pinned to it
    farm:backends:inflight       hash  address -> LLM calls in flight
    farm:backends:unhealthy      set   addresses that failed and are skipped until a probe succeeds
    farm:backends:seq            counter giving each added backend a generation
    farm:sticky:{key}            string "address|gen" a job or gateway session is pinned to
Service:
    farm:accepting               string "0" after /stop; absent or "1" means new work is accepted
    farm:workers                 zset  hostname -> when its registration expires (heartbeats push it on)
    farm:workers:info            hash  hostname -> JSON {node, queues, pid, host, concurrency}
    farm:draining:{hostname}     string set while that worker shuts down (its stages give their work back)
    farm:ready:{node}            zset  job ids holding a READY slot on that node (score = taken at): init
                                       running or done there, run not started yet; bounded by
                                       FARM_READY_BUFFER. The job hash's `ready_node` names the set.
    farm:orphan_sweep:{host}     string lock: one worker per host looks for orphaned sandboxes
    farm:stall_sweep             string lock: one worker at a time looks for stalled jobs
    farm:reaper                  string lease (2 s): the one worker whose reaper thread currently leads
    farm:stats                   hash  counters: stage_seconds_sum:{stage}, stage_count:{stage},
                                       jobs_total:{state}, gateway_calls:{provider}
"""

PREFIX = "farm:"

ACTIVE_JOBS = "farm:jobs:active"
JOBS_BY_STATE = "farm:jobs:by_state"
JOBS_INDEX = "farm:jobs:index"
REVOKED = "farm:revoked"
LEASES = "farm:leases"
CALLBACKS = "farm:callbacks"
DONE_CHANNEL = "farm:done"
TASKS = "farm:tasks"
BACKENDS = "farm:backends"
BACKENDS_ASSIGNED = "farm:backends:assigned"
BACKENDS_INFLIGHT = "farm:backends:inflight"
BACKENDS_UNHEALTHY = "farm:backends:unhealthy"
BACKENDS_SEQ = "farm:backends:seq"
ACCEPTING = "farm:accepting"
STALL_SWEEP = "farm:stall_sweep"
STATS = "farm:stats"
WORKERS = "farm:workers"
WORKERS_INFO = "farm:workers:info"
REAPER = "farm:reaper"


def job(job_id: str) -> str:
    return f"farm:job:{job_id}"


def task(task_id: str) -> str:
    return f"farm:task:{task_id}"


def sticky(key: str) -> str:
    return f"farm:sticky:{key}"


def ready(node: str) -> str:
    return f"farm:ready:{node}"


def draining(hostname: str) -> str:
    return f"farm:draining:{hostname}"
