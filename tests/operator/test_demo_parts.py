"""The demo's pure parts and its database claim on a real Redis."""

from __future__ import annotations

import redis
from hypothesis import given
from hypothesis import strategies as st

from farm.demo import CLAIM_KEY, claim_database, cycle_problems, math_problems, release_database

SUITE = [{"id": f"p{i}", "question": "q", "answer": "1"} for i in range(3)]


@given(st.integers(min_value=0, max_value=50))
def test_tasks_beyond_the_suite_cycle_with_ids_of_their_own(n: int) -> None:
    problems = cycle_problems(SUITE, n)
    assert len(problems) == n
    assert len({p["id"] for p in problems}) == n
    assert [p["question"] for p in problems] == ["q"] * n


def test_the_shipped_suite_is_cycled_for_100_tasks() -> None:
    suite = math_problems()
    assert len(suite) < 100
    assert len(cycle_problems(suite, 100)) == 100


def test_demo_claims_an_empty_database_and_flushes_it(redis_url: str) -> None:
    server = redis_url.rsplit("/", 1)[0]
    busy = redis.Redis.from_url(f"{server}/15")
    busy.set("someone-elses", "1")
    try:
        claimed = claim_database(redis_url)
        assert claimed == f"{server}/14"  # 15 is in use
        again = claim_database(redis_url)
        assert again == f"{server}/13"  # two demos never share one
        client = redis.Redis.from_url(claimed)
        assert client.get(CLAIM_KEY) == b"1"
        release_database(claimed)
        release_database(again)
        assert client.dbsize() == 0
        client.close()
        assert busy.get("someone-elses") == b"1"
    finally:
        busy.flushdb()
        busy.close()
