"""Which Flower command lines may start: loopback by default, another address only with auth or the
documented opt-out (issue 37); options as Flower reads them (`--name=value` over FLOWER_NAME)."""

from __future__ import annotations

import pytest

from farm.flower_guard import ALLOW_OPEN_ENV, flower_option, is_loopback, open_listening_refusal

CELERY = ["celery", "-A", "farm", "flower", "--port=5555"]


@pytest.mark.parametrize("address", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"])
def test_loopback_addresses_start_without_auth(address: str) -> None:
    assert is_loopback(address)
    assert open_listening_refusal([*CELERY, f"--address={address}"], {}) is None


@pytest.mark.parametrize("address", ["0.0.0.0", "::", "10.1.2.3", "head-node", ""])
def test_other_addresses_without_auth_are_refused_in_one_line(address: str) -> None:
    refusal = open_listening_refusal([*CELERY, f"--address={address}"], {})
    assert refusal is not None and "\n" not in refusal
    assert "--basic-auth" in refusal and ALLOW_OPEN_ENV in refusal
    assert (address or "every interface") in refusal


@pytest.mark.parametrize(
    ("argv", "env"),
    [
        (["--address=0.0.0.0", "--basic-auth=op:pw"], {}),
        (["--address=0.0.0.0", "--basic_auth=op:pw"], {}),
        (["--address=0.0.0.0"], {"FLOWER_BASIC_AUTH": "op:pw"}),
        (["--address=0.0.0.0", r"--auth=.*@example\.org"], {}),
        ([], {"FLOWER_ADDRESS": "0.0.0.0", "FLOWER_BASIC_AUTH": "op:pw"}),
        (["--address=0.0.0.0"], {ALLOW_OPEN_ENV: "true"}),
        (["--unix-socket=/run/flower.sock", "--address=0.0.0.0"], {}),
    ],
)
def test_auth_a_unix_socket_or_the_opt_out_lets_it_start(argv: list[str], env: dict[str, str]) -> None:
    assert open_listening_refusal([*CELERY, *argv], env) is None


def test_the_command_line_wins_over_the_environment() -> None:
    argv = [*CELERY, "--address=127.0.0.1"]
    assert flower_option(argv, {"FLOWER_ADDRESS": "0.0.0.0"}, "address") == "127.0.0.1"
    assert open_listening_refusal(argv, {"FLOWER_ADDRESS": "0.0.0.0"}) is None
    assert open_listening_refusal([*CELERY, "--address=0.0.0.0"], {"FLOWER_ADDRESS": "127.0.0.1"})
    assert open_listening_refusal(CELERY, {ALLOW_OPEN_ENV: "false", "FLOWER_ADDRESS": "0.0.0.0"})
