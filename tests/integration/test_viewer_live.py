"""The viewer's live snapshot and group page on the integration farm's API, over HTTP (moved from
tests/ui/test_job_pages.py: there it was the default run's one user of tests/ui's farm, a whole farm of five
processes started for one request; the viewer is mounted on every farm's API)."""

from __future__ import annotations

import httpx


def test_live_data_and_group_pages_read_through_the_store(api: httpx.Client) -> None:
    """The live snapshot (farm/status.py plus the index's recent rows) and a group page, over HTTP."""
    submitted = api.post("/process", json={"instance": {"handler": "noop"}, "metadata": {"group_id": "g-ui"}})
    assert submitted.status_code == 200, submitted.text
    live = api.get("/ui/api/live").json()
    assert {"queues", "jobs", "stages", "failures"} <= live.keys()
    assert live["failures"]["window"] >= 1
    group = api.get("/ui/groups/g-ui")
    assert group.status_code == 200 and "g-ui" in group.text
    assert api.get("/ui/groups/never-a-group").status_code == 200
