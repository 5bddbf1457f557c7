"""add_llm_server and callback_url: http(s) only, inside the operator's allow-list, never metadata."""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Callable

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from farm.api.url_allow import ANYWHERE, LOOPBACK_AND_PRIVATE, URLAllowList, URLRefused
from farm.launcher import LocalFarm
from farm.settings import Settings

REFUSED_BACKENDS = [
    "file:///etc/passwd",
    "ftp://127.0.0.1/v1",
    "gopher://127.0.0.1:6379/_FLUSHALL",
    "http:///v1",
    "http://127.0.0.1:99999/v1",
    "http://169.254.169.254/latest/meta-data",
    "http://[fd00:ec2::254]/",
    "http://[::ffff:169.254.169.254]/",
    "http://[fe80::1%25eth0]/v1",
    "http://8.8.8.8/v1",  # public: not in the default backend allow-list
    "http://127.0.0.1/v1\r\nX-Injected: 1",
    "http://no-such-host.invalid/v1",
]


@pytest.mark.parametrize("address", REFUSED_BACKENDS)
def test_add_llm_server_refuses(api: httpx.Client, address: str) -> None:
    def addresses() -> list[str]:  # the session's Redis may hold other modules' backends
        return sorted(b["address"] for b in api.get("/llm_servers").json())

    before = addresses()
    response = api.post("/add_llm_server", json={"address": address})
    assert response.status_code == 422, response.text
    assert [e["loc"] for e in response.json()["detail"]] == [["body", "address"]]
    assert addresses() == before


def test_add_llm_server_takes_loopback_private_and_localhost(api: httpx.Client) -> None:
    for address in [
        "http://127.0.0.1:9/v1",
        "https://10.1.2.3:8000/v1",
        "http://localhost:9/v1",
        "http://[::1]:9/v1",
    ]:
        assert api.post("/add_llm_server", json={"address": address}).status_code == 200, address
    assert api.post("/clear_llm_server").json() == []


@pytest.mark.parametrize(
    "url", ["http://169.254.169.254/latest/meta-data/", "http://[fd00:ec2::254]/", "http://100.100.100.200/"]
)
def test_callback_to_metadata_is_refused(api: httpx.Client, url: str) -> None:
    body = {"instance": {"handler": "noop"}, "wait": False, "callback_url": url}
    response = api.post("/process", json=body)
    assert response.status_code == 422, response.text
    assert [e["loc"] for e in response.json()["detail"]] == [["body", "callback_url"]]
    task = {"task_id": "t-callback-metadata", "instruction": "x", "callback_url": url}
    response = api.post("/rollout/task/submit", json=task)
    assert response.status_code == 422 and api.get("/rollout/task/t-callback-metadata").status_code == 404


def test_operator_allow_lists(start_api: Callable[..., LocalFarm]) -> None:
    farm = start_api(
        FARM_BACKEND_ALLOW="backend.test,.pool.test,10.9.0.0/16", FARM_CALLBACK_ALLOW="10.0.0.0/8"
    )
    with httpx.Client(base_url=farm.api_url, timeout=10) as http:
        for ok in ["http://backend.test/v1", "http://a.pool.test/v1", "http://10.9.1.1/v1"]:
            assert http.post("/add_llm_server", json={"address": ok}).status_code == 200, ok
        for bad in ["http://127.0.0.1:9/v1", "http://10.8.1.1/v1", "http://evilpool.test/v1"]:
            assert http.post("/add_llm_server", json={"address": bad}).status_code == 422, bad
        assert http.post("/clear_llm_server").status_code == 200
        body = {"instance": {"handler": "noop"}, "wait": False}
        assert http.post("/process", json={**body, "callback_url": "http://127.0.0.1:9/"}).status_code == 422
        assert http.post("/process", json={**body, "callback_url": "http://10.0.0.9/"}).status_code == 202


def test_defaults_are_the_documented_ones() -> None:
    settings = Settings()
    assert settings.backend_allow == LOOPBACK_AND_PRIVATE
    assert settings.callback_allow == ANYWHERE


_ANY_CALLBACK = URLAllowList.parse(ANYWHERE)


@given(st.ip_addresses())
def test_metadata_link_local_and_mapped_addresses_are_never_callback_targets(
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> None:
    special = ip.is_link_local or ip == ipaddress.ip_address("fd00:ec2::254")
    if special or getattr(ip, "ipv4_mapped", None) is not None:
        host = f"[{ip}]" if ip.version == 6 else str(ip)
        with pytest.raises(URLRefused):
            asyncio.run(_ANY_CALLBACK.check(f"http://{host}/"))


@given(st.ip_addresses(v=4, network="169.254.0.0/16"))
def test_every_link_local_v4_is_refused(ip: ipaddress.IPv4Address) -> None:
    assert not _ANY_CALLBACK.address_allowed(str(ip))
