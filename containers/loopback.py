"""Allocates a private 127.x.y.z address per network-enabled sandbox, safely across processes on a node.

A lease is a file named after the address, created with O_EXCL in a shared directory; it records the owner
sandbox and pid so a lease whose owner died can be taken over.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import zlib
from pathlib import Path

from containers.procs import is_same_process, start_ticks

# 127.0.0.0/16 is left to the host (127.0.0.1, 127.0.0.53, ...).
FIRST = int(ipaddress.IPv4Address("127.1.0.1"))
LAST = int(ipaddress.IPv4Address("127.255.255.254"))


class LoopbackAllocator:
    def __init__(self, lease_dir: str | Path) -> None:
        self.lease_dir = Path(lease_dir)
        self.lease_dir.mkdir(parents=True, exist_ok=True)

    def allocate(self, owner: str, pid: int | None = None) -> str:
        """Lease a free address for `owner`; `pid` (default: this process) keeps the lease alive."""
        pid = os.getpid() if pid is None else pid
        record = json.dumps({"owner": owner, "pid": pid, "start": start_ticks(pid)}).encode()
        span = LAST - FIRST + 1
        # Start probing at a point derived from the owner so concurrent allocators rarely collide.
        offset = zlib.crc32(owner.encode()) % span
        for step in range(span):
            address = str(ipaddress.IPv4Address(FIRST + (offset + step) % span))
            if address.endswith(".0") or address.endswith(".255"):
                continue
            if self._try_lease(address, record):
                return address
        raise RuntimeError("no free loopback address")

    def _try_lease(self, address: str, record: bytes) -> bool:
        path = self.lease_dir / address
        for _ in range(2):
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                if not self._reclaim_if_stale(path):
                    return False
                continue
            with os.fdopen(fd, "wb") as handle:
                handle.write(record)
            return True
        return False

    def _reclaim_if_stale(self, path: Path) -> bool:
        # Reclaimers serialise on a lock file, so a lease is re-read and removed by one of them only; a
        # fresh lease cannot appear in between because creation needs the path to be absent.
        with open(self.lease_dir / ".reclaim.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                lease = json.loads(path.read_bytes() or b"{}")
            except FileNotFoundError:
                return True
            except (OSError, ValueError):
                return False
            if not lease or is_same_process(lease.get("pid"), lease.get("start")):
                return False  # alive, or being written right now
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            return True

    def reassign(self, address: str, owner: str, pid: int | None) -> None:
        """Tie `owner`'s lease to another process (the sandbox itself, once started)."""
        if pid is None:
            return
        path = self.lease_dir / address
        record = json.dumps({"owner": owner, "pid": pid, "start": start_ticks(pid)}).encode()
        temporary = path.with_name(f".{address}.{os.getpid()}")
        temporary.write_bytes(record)
        os.replace(temporary, path)

    def release(self, address: str, owner: str) -> None:
        path = self.lease_dir / address
        with contextlib.suppress(OSError, ValueError):
            if json.loads(path.read_bytes()).get("owner") == owner:
                path.unlink()

    def leases(self) -> dict[str, str]:
        """address -> owner of every current lease."""
        out = {}
        for path in self.lease_dir.iterdir():
            if path.name.startswith("."):
                continue
            with contextlib.suppress(OSError, ValueError):
                out[path.name] = json.loads(path.read_bytes())["owner"]
        return out
