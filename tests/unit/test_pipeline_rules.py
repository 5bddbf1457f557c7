"""Pure rules of the pipeline controls: broker priorities and when a sandbox is an orphan."""

from __future__ import annotations

import json
import time

from hypothesis import given
from hypothesis import strategies as st

from containers.handle import SandboxHandle
from farm.jobs.dispatch import MOST_URGENT, broker_priority
from farm.jobs.record import JobFields
from tasks.orphans import is_orphan as orphan_rule


@given(st.integers(-5, 20), st.integers(-5, 20))
def test_more_urgent_jobs_get_a_list_read_earlier(a: int, b: int) -> None:
    assert 0 <= broker_priority(a) <= MOST_URGENT
    if 0 <= a < b <= MOST_URGENT:
        assert broker_priority(a) > broker_priority(b)  # kombu reads lower numbers first


def _handle(sandbox_id: str = "abc") -> SandboxHandle:
    """A sandbox as the sweep finds it; only its id matters to the rule (its paths name nothing real)."""
    paths = dict.fromkeys(("sandbox_dir", "workspace", "socket_path"), "/x")
    return SandboxHandle(
        id=sandbox_id,
        runtime="local",
        node="n",
        workdir="/workspace",
        created_at=0.0,
        labels={"job_id": "j"},
        **paths,
    )


def test_orphan_rules() -> None:
    def is_orphan(handle: SandboxHandle, fields: dict[str, str | None], now: float) -> bool:
        stored = JobFields({name: value for name, value in fields.items() if value is not None})
        return orphan_rule(handle, stored, now)  # the job hash's fields, as stored

    now = time.time()
    mine = json.dumps({"sandbox": {"id": "abc"}})
    other = json.dumps({"sandbox": {"id": "zzz"}})
    assert is_orphan(_handle(), {"state": None}, now)  # the job is gone
    assert is_orphan(_handle(), {"state": "done", "init_state": mine}, now)  # the job is over
    assert not is_orphan(_handle(), {"state": "init", "lease_expires": str(now + 5)}, now)  # being started
    assert not is_orphan(_handle(), {"state": "eval", "lease_expires": str(now + 5)}, now)  # a fresh eval one
    assert not is_orphan(_handle(), {"state": "init", "init_state": mine}, now)  # waiting for run
    assert is_orphan(_handle(), {"state": "init", "init_state": other}, now)  # a retry made another
    assert is_orphan(_handle(), {"state": "queued", "lease_expires": str(now - 1)}, now)  # lease lapsed
