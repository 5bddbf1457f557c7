"""POST /cancel's input rule, over HTTP on the session's API (moved from tests/operator/test_redis_outage.py,
where it started an API process of its own for these two requests)."""

from __future__ import annotations

import httpx


def test_cancel_without_a_selector_is_a_422_naming_them(api: httpx.Client) -> None:
    answer = api.post("/cancel", json={})
    assert answer.status_code == 422, answer.text
    assert "job_id, task_id, group_id, older_than_policy_version" in answer.text
    assert api.post("/cancel", json={"job_id": "nope"}).status_code == 404  # no such job
