"""The job state store on a real local Redis Cluster (three masters; tests/core/redis_cluster.py).

Issue 18 asks that each job's keys share a hash tag so that the store can run on a cluster. Not yet:
every job script also touches farm-wide keys (active set, by_state, leases, stats, the queue list its
hop enqueues to) and builds `farm:ready:<node>` / `farm:job:<id>` inside Lua, so its keys fall in
several slots. The strict xfail below records that gap and turns red once the schema is migrated."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from redis.exceptions import RedisClusterException

from farm.jobs.messages import QueuedMessage
from farm.jobs.spec import JobSpec
from farm.jobs.store import JobStore
from tests.core.redis_cluster import LocalCluster, missing_binaries

pytestmark = pytest.mark.skipif(missing_binaries() is not None, reason=str(missing_binaries()))


@pytest.fixture(scope="module")
def cluster() -> Iterator[redis.RedisCluster]:
    local = LocalCluster().start()
    client = local.client()
    try:
        yield client
    finally:
        client.close()
        local.stop()


def test_the_cluster_runs_a_script_whose_keys_share_a_hash_tag(cluster: redis.RedisCluster) -> None:
    slots = {cluster.keyslot(k) for k in ("farm:{j1}:job", "farm:{j1}:lease", "farm:{j2}:job")}
    assert len(slots) == 2  # the tag, not the key, picks the slot
    script = cluster.register_script(
        "redis.call('HSET', KEYS[1], 'a', ARGV[1]); return redis.call('INCR', KEYS[2])"
    )
    assert script(keys=["farm:{j1}:job", "farm:{j1}:lease"], args=["x"]) == 1
    assert cluster.hget("farm:{j1}:job", "a") == "x"
    assert len({cluster.get_node_from_key(f"farm:{{j{i}}}:job").port for i in range(32)}) == 3  # spread


@pytest.mark.xfail(raises=RedisClusterException, strict=True, reason="job keys do not share a hash tag yet")
def test_a_job_is_created_on_the_cluster(cluster: redis.RedisCluster) -> None:
    store = JobStore(cluster, ttl_s=3600)  # type: ignore[arg-type]
    spec = JobSpec(job_id="j1", handler="noop", instance={}, timeout_s=60.0)
    assert store.create(spec, {"init": "j1.init"}, QueuedMessage("q:init", "init j1"))
