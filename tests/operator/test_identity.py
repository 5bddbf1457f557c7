"""Farm identity and URL masking (pure logic)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from farm.identity import farm_id, farm_workdir, mask_url
from farm.launcher import Backoff

secrets = st.text(
    alphabet=st.characters(blacklist_characters="@/:;", min_codepoint=33, max_codepoint=126), min_size=1
)


def test_mask_url_hides_the_password_only() -> None:
    assert mask_url("redis://:s3cret@db:6379/2") == "redis://:***@db:6379/2"
    assert mask_url("rediss://user:pw@db:6380/0") == "rediss://user:***@db:6380/0"
    assert mask_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"
    assert mask_url("sentinel://:a@h1:26379/0;sentinel://:b@h2:26379/0") == (
        "sentinel://:***@h1:26379/0;sentinel://:***@h2:26379/0"
    )


@given(secrets)
def test_a_password_never_shows_and_never_changes_the_farm(password: str) -> None:
    url = f"redis://:{password}@10.0.0.5:6379/3"
    assert mask_url(url) == "redis://:***@10.0.0.5:6379/3"
    assert farm_id(url) == farm_id("redis://:other@10.0.0.5:6379/3")


def test_farm_id_is_stable_and_tells_farms_apart() -> None:
    assert farm_id("redis://127.0.0.1:6379") == farm_id("redis://127.0.0.1:6379/0")
    assert farm_id("redis://127.0.0.1:6379/0") != farm_id("redis://127.0.0.1:6379/1")
    assert farm_id("redis://127.0.0.1:6379/0") != farm_id("redis://127.0.0.1:6380/0")
    assert len(farm_id("redis://x")) == 8


def test_each_farm_has_its_own_scratch_dir() -> None:
    a, b = farm_workdir("redis://127.0.0.1:1/0"), farm_workdir("redis://127.0.0.1:2/0")
    assert a != b and a.parent == b.parent


@given(st.lists(st.floats(min_value=0, max_value=1000), min_size=1, max_size=30))
def test_backoff_doubles_to_a_cap_and_resets_after_a_stable_run(uptimes: list[float]) -> None:
    backoff, previous = Backoff(base_s=0.5, cap_s=30, stable_s=60), 0.0
    for uptime in uptimes:
        delay = backoff.next_delay(uptime)
        assert 0.5 <= delay <= 30
        if uptime >= 60:
            assert delay == 0.5
        elif previous:
            assert delay == min(30, previous * 2)
        previous = delay
