"""Paging the job index against a real Redis: every job once, newest first, filters, bounded work."""

from __future__ import annotations

import asyncio

import pytest
import redis
import redis.asyncio as aioredis
from hypothesis import given
from hypothesis import strategies as st

from farm.jobs.store import AsyncJobStore
from farm.ui.job_pages import SCAN_BUDGET, JobFilter, JobRow, job_page
from tests.ui.seed import seed_jobs


def walk(url: str, flt: JobFilter, size: int) -> list[list[JobRow]]:
    async def go() -> list[list[JobRow]]:
        client = aioredis.Redis.from_url(url)
        pages, cursor = [], None
        try:
            while True:
                page = await job_page(AsyncJobStore(client, 3600).index, flt, size, cursor)
                assert page.scanned <= SCAN_BUDGET + size
                pages.append(page.rows)
                if page.next_cursor is None:
                    return pages
                cursor = page.next_cursor
        finally:
            await client.aclose()

    return asyncio.run(go())


@pytest.fixture
def seeded(redis_url: str) -> list[str]:
    return seed_jobs(redis.Redis.from_url(redis_url), 700)


def test_pages_cover_every_job_once_newest_first(redis_url: str, seeded: list[str]) -> None:
    pages = walk(redis_url, JobFilter(), 64)
    ids = [r.job_id for p in pages for r in p]
    assert ids == seeded[::-1]
    assert all(len(p) == 64 for p in pages[:-1])


def test_rows_carry_reward_error_and_duration_from_the_result(redis_url: str, seeded: list[str]) -> None:
    rows = {r.job_id: r for p in walk(redis_url, JobFilter(), 500) for r in p}
    failed, done = rows["seed-00007"], rows["seed-00008"]
    assert failed.state == "failed" and failed.reward is None and failed.error_class == "run:sandbox_crash"
    assert done.reward == 1.0 and done.error_type is None and done.handler == "swe"
    assert done.duration_s == pytest.approx(0.1 + 0.2 + 8 + 0.1)
    assert done.group_id == "seed-g2" and done.policy_version == 3


def test_filters_match_the_seeded_layout(redis_url: str, seeded: list[str]) -> None:
    flt = JobFilter(state="done", handler="swe", min_reward=0.5)
    got = [r.job_id for p in walk(redis_url, flt, 50) for r in p]
    want = [f"seed-{i:05d}" for i in range(700) if i % 7 and i % 3 == 2]  # swe: reward 1.0
    assert got == want[::-1]
    assert not [r for p in walk(redis_url, JobFilter(handler="math", min_reward=0.5), 50) for r in p]
    group = [r.job_id for p in walk(redis_url, JobFilter(group="seed-g10"), 50) for r in p]
    assert group == ["seed-00043", "seed-00042", "seed-00041", "seed-00040"]


def test_a_rare_filter_stops_at_the_scan_budget(redis_url: str) -> None:
    seed_jobs(redis.Redis.from_url(redis_url), SCAN_BUDGET * 2)
    client_pages = walk(redis_url, JobFilter(handler="nothing"), 50)
    assert len(client_pages) >= 2 and all(not p for p in client_pages)


@given(
    state=st.sampled_from([None, "done", "failed"]),
    reward=st.one_of(st.none(), st.floats(-1, 2)),
    floor=st.one_of(st.none(), st.floats(-1, 2)),
)
def test_filter_reward_bounds(state: str | None, reward: float | None, floor: float | None) -> None:
    row = JobRow(job_id="j", state="done", reward=reward)
    flt = JobFilter(state=state, min_reward=floor)
    expected = state in (None, "done") and (floor is None or (reward is not None and reward >= floor))
    assert flt.matches(row) is expected
