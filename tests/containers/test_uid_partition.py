"""Per-uid kernel counters are each sandbox's own: as root, every sandbox runs as a uid of its own from a
range (FARM_SANDBOX_UID_RANGE), so one holding inotify instances leaves a concurrent one its full share.
On main every sandbox ran as `nobody`: a job holding 64 instances left its neighbour 64 of 128. The
control is exactly that: a fixed FARM_SANDBOX_UID."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from containers.identity import _checked_range, claim_identity, release_identity, uid_range
from containers.local import LocalRuntime, host_problems
from containers.spec import SandboxSpec
from tests.waiting import wait_until

as_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="sandboxes get uids of their own only from a root farm"
)

HOLD = (
    'python3 -c "import ctypes, time; libc = ctypes.CDLL(None); '
    "fds = [libc.inotify_init() for _ in range(64)]; print(sum(f >= 0 for f in fds), flush=True); "
    'time.sleep(60)" > held 2>&1 &'
)
COUNT = (
    'python3 -c "import ctypes; libc = ctypes.CDLL(None); '
    'print(sum(libc.inotify_init() >= 0 for _ in range(200)))"'
)


def _max_instances() -> int:
    return int(Path("/proc/sys/fs/inotify/max_user_instances").read_text())


@as_root
@pytest.mark.parametrize("fixed_uid", [None, "65534"])
def test_inotify_instances_held_by_one_sandbox_leave_the_other_its_share(
    runtime: LocalRuntime, monkeypatch: pytest.MonkeyPatch, fixed_uid: str | None
) -> None:
    if fixed_uid is None:
        monkeypatch.delenv("FARM_SANDBOX_UID", raising=False)
    else:
        monkeypatch.setenv("FARM_SANDBOX_UID", fixed_uid)
    limit = _max_instances()
    with runtime.start(SandboxSpec()) as holder, runtime.start(SandboxSpec()) as other:
        holder.exec(HOLD)
        wait_until(
            lambda: holder.exec("cat held").stdout.strip(), 10, accept=lambda s: s == "64", what="64 held"
        )
        got = int(other.exec(COUNT).stdout.strip())
        if fixed_uid is None:
            assert holder.info.uid != other.info.uid
            assert got == limit  # its own counter, untouched by the holder
        else:
            assert holder.info.uid == other.info.uid == 65534
            assert got <= limit - 64  # the control: one counter for both


@as_root
def test_uids_are_claimed_lowest_first_released_and_reclaimed_when_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FARM_SANDBOX_UID", raising=False)
    monkeypatch.setenv("FARM_SANDBOX_UID_RANGE", "1879113000:3")  # a range of this test's own
    first = uid_range()
    assert first == (1879113000, 3)
    dirs = [tmp_path / name for name in "abcd"]
    for directory in dirs:
        directory.mkdir()
    a, b, c = (claim_identity(str(d)) for d in dirs[:3])
    assert [i.uid for i in (a, b, c) if i] == [1879113000, 1879113001, 1879113002]
    with pytest.raises(OSError, match="every sandbox uid"):
        claim_identity(str(dirs[3]))
    release_identity(1879113001, str(dirs[3]))  # not its claim: kept
    with pytest.raises(OSError):
        claim_identity(str(dirs[3]))
    release_identity(1879113001, str(dirs[1]))
    assert (again := claim_identity(str(dirs[3]))) is not None and again.uid == 1879113001
    dirs[0].rmdir()  # its sandbox gone without a release (a killed worker): the claim is stale
    assert (stale := claim_identity(str(tmp_path / "e"))) is not None and stale.uid == 1879113000
    for uid, directory in ((1879113000, tmp_path / "e"), (1879113001, dirs[3]), (1879113002, dirs[2])):
        release_identity(uid, str(directory))


def _range_refusal(monkeypatch: pytest.MonkeyPatch, raw: str) -> str | None:
    monkeypatch.delenv("FARM_SANDBOX_UID", raising=False)
    monkeypatch.setenv("FARM_SANDBOX_UID_RANGE", raw)
    _checked_range.cache_clear()
    try:
        uid_range()
    except ValueError as exc:
        return str(exc)
    finally:
        _checked_range.cache_clear()
    return None


def test_a_range_that_would_share_a_uid_with_an_account_or_subordinate_range_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sandbox running as a uid that owns files on the host (an account, a group, a user's rootless
    container range) could read and write them: such a range is refused, naming the setting and the owner."""
    subuid = tmp_path / "subuid"
    subuid.write_text("builder:1700000000:65536\n")
    monkeypatch.setattr("containers.identity.SUBORDINATE_TABLES", (str(subuid),))
    nobody = _range_refusal(monkeypatch, "65530:10")
    assert nobody and "FARM_SANDBOX_UID_RANGE" in nobody and "nobody" in nobody
    sub = _range_refusal(monkeypatch, "1700065000:1000")
    assert sub and "builder's range" in sub
    assert "FIRST:COUNT" in (_range_refusal(monkeypatch, "lots") or "")
    assert _range_refusal(monkeypatch, "0:5") is not None
    assert _range_refusal(monkeypatch, "1879113000:3") is None  # the control: a range nobody uses


def test_a_refused_range_is_said_at_worker_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FARM_SANDBOX_UID", raising=False)
    monkeypatch.setenv("FARM_SANDBOX_UID_RANGE", "65530:10")
    _checked_range.cache_clear()
    try:
        assert any("no sandbox can start" in p and "nobody" in p for p in host_problems())
    finally:
        _checked_range.cache_clear()
