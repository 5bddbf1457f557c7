"""The task index (keys.TASKS) forgets tasks whose records have expired: it never grows without bound."""

from __future__ import annotations

import redis

from farm import keys
from farm.jobs.task_records import CLAIM_TASK


def test_claiming_a_task_prunes_index_entries_older_than_the_ttl(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    claim = client.register_script(CLAIM_TASK)
    ttl = 100
    for task, now in [("old", 1000.0), ("recent", 1950.0), ("new", 2000.0)]:
        assert claim(keys=[keys.task(task), keys.TASKS], args=["{}", "[]", now, ttl, task]) == 1
    assert [m.decode() for m in client.zrange(keys.TASKS, 0, -1)] == ["recent", "new"]
    assert claim(keys=[keys.task("new"), keys.TASKS], args=["{}", "[]", 2001.0, ttl, "new"]) == 0  # once
