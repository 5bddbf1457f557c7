"""Serve the built Gemma 3 270M with the real vLLM on a free loopback port, for as long as needed.

    python ops/real_vllm/serve.py [--seconds 600]     # prints the root URL once healthy; Ctrl-C stops it

or from Python (the tests): `with RealVllm.start() as server: server.root ...`.

CPU-friendly settings: a small window (`--max-model-len`, FARM_REAL_VLLM_MAX_LEN, default 1024), a 1 GiB
KV cache (`VLLM_CPU_KVCACHE_SPACE`), no core binding (the machine is shared), eager mode (no compile step).
`VLLM_SERVER_DEV_MODE=1` opens vLLM's RLHF/dev routes (/pause, /resume, /collective_rpc, /weight_info,
/update_weight_version, ...) that the farm's publish speaks (farm/inference/publish.py). The tool-call
parser is `pythonic` (FARM_REAL_VLLM_TOOL_PARSER), vLLM's for Gemma 3 and the farm's for the family. The
server runs at nice 5, in its own process group, and is stopped with it (SIGTERM, then SIGKILL).
Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

sys.path.insert(0, str(Path(__file__).resolve().parent))
import build

SERVED_NAME = "gemma-3-270m"


def _die_with_parent() -> None:
    """vLLM gets SIGTERM when the process that started it dies, however it dies (a test runner killed by its
    timeout included), so no server is left behind (Linux's PR_SET_PDEATHSIG, kept across exec)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RealVllm:
    """One vLLM server process (its own process group)."""

    def __init__(self, proc: subprocess.Popen[bytes] | None, root: str, model: str, log: Path) -> None:
        self.proc, self.root, self.model, self.log = proc, root, model, log

    @classmethod
    def attach(cls, root: str) -> RealVllm:
        """A server already running (started by `serve.py`, FARM_REAL_VLLM_ROOT), used and left running."""
        paths = build.built() or {"cache": str(build.cache_dir())}
        return cls(None, root.rstrip("/"), SERVED_NAME, Path(paths["cache"]) / "vllm-attached.log")

    @classmethod
    def start_or_attach(cls, ready_s: float = 600.0) -> RealVllm:
        """The server FARM_REAL_VLLM_ROOT names (a quicker iteration: no 2-4 min start), else a new one."""
        root = os.environ.get("FARM_REAL_VLLM_ROOT")
        return cls.attach(root) if root else cls.start(ready_s=ready_s)

    @property
    def address(self) -> str:
        """The OpenAI base the farm registers (`/v1`)."""
        return f"{self.root}/v1"

    @classmethod
    def start(cls, log: Path | None = None, ready_s: float = 600.0, nice: int = 5) -> RealVllm:
        paths = build.built()
        if paths is None:
            raise RuntimeError("the real vLLM is not built: run python ops/real_vllm/build.py")
        port = free_port()
        log = log or Path(paths["cache"]) / f"vllm-{port}.log"
        env = {
            **os.environ,
            "VLLM_SERVER_DEV_MODE": "1",
            "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
            "VLLM_CPU_OMP_THREADS_BIND": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "nobind"),
            "VLLM_NO_USAGE_STATS": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
        }
        argv = [
            "nice", "-n", str(nice), paths["python"], "-m", "vllm.entrypoints.openai.api_server",
            "--model", paths["model"], "--served-model-name", SERVED_NAME,
            "--host", "127.0.0.1", "--port", str(port),
            "--max-model-len", os.environ.get("FARM_REAL_VLLM_MAX_LEN", "1024"),
            "--dtype", "bfloat16", "--enforce-eager", "--max-num-seqs", "8",
            "--enable-auto-tool-choice",
            "--tool-call-parser", os.environ.get("FARM_REAL_VLLM_TOOL_PARSER", "pythonic"),
            "--structured-outputs-config",
            json.dumps({"backend": os.environ.get("FARM_REAL_VLLM_STRUCTURED_BACKEND", "guidance")}),
        ]  # fmt: skip
        with log.open("ab") as out:
            proc = subprocess.Popen(
                argv,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        server = cls(proc, f"http://127.0.0.1:{port}", SERVED_NAME, log)
        try:
            server.wait_healthy(ready_s)
        except BaseException:
            server.stop()
            raise
        return server

    def wait_healthy(self, ready_s: float) -> None:
        deadline = time.monotonic() + ready_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"vLLM exited with {self.proc.returncode}; see {self.log}")
            try:
                with urllib.request.urlopen(f"{self.root}/health", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(1.0)
        raise RuntimeError(f"vLLM did not become healthy within {ready_s:.0f} s; see {self.log}")

    def stop(self, grace_s: float = 20.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return  # attached, or already ended
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        except ProcessLookupError:
            pass

    def __enter__(self) -> RealVllm:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=600.0, help="stop by itself after this long")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _interrupt)  # a plain `kill` stops vLLM too, never orphans it
    with RealVllm.start() as server:
        print(json.dumps({"root": server.root, "address": server.address, "model": server.model}), flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            time.sleep(args.seconds)


if __name__ == "__main__":
    main()
