"""Tool latency on this machine: bash round trips (execution server vs bare ptyprocess vs tmux vs a fresh
subprocess), IPython, UDS vs TCP loopback, and sandbox start+stop. Prints medians over N calls and ratios
against the baselines measured in the same run.

    python bench/tools.py [--n 200]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.common import parse_quick

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from containers.exec_client import ExecClient
from containers.local import LocalRuntime
from containers.spec import SandboxSpec
from containers.tools.bash import BashSession


def measure(call: Callable[[], object], n: int, warmup: int = 5) -> list[float]:
    for _ in range(warmup):
        call()
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


class TmuxShell:
    """The baseline: send-keys, then poll capture-pane until the command's output shows up."""

    def __init__(self) -> None:
        self.socket = f"farm-bench-{os.getpid()}"
        self.counter = 0
        self._tmux("new-session", "-d", "-s", "bench", "-x", "200", "-y", "50", "bash --norc --noprofile")
        self._tmux("send-keys", "-t", "bench", "PS1='$ '; clear", "Enter")
        time.sleep(0.2)

    def _tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True).stdout

    def run(self) -> None:
        self.counter += 1
        marker = f"hi-{self.counter}"
        self._tmux("send-keys", "-t", "bench", f"echo {marker}", "Enter")
        while marker not in self._tmux("capture-pane", "-p", "-t", "bench").splitlines():
            pass
        if self.counter % 20 == 0:
            self._tmux("send-keys", "-t", "bench", "clear", "Enter")
            time.sleep(0.01)

    def close(self) -> None:
        self._tmux("kill-server")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="calls per row (at least 200 for the report)")
    args = parse_quick(parser, n=20)
    n = args.n
    rows: dict[str, list[float]] = {}
    root = Path(tempfile.mkdtemp(prefix="farm-bench-"))
    runtime = LocalRuntime(root=root)
    try:
        with runtime.start(SandboxSpec(network=True, warm_tools=["python", "bash"])) as sandbox:
            sandbox.tool("python", code="1")  # wait for the kernel to finish booting before timing anything
            rows["bash echo via execution server (UDS)"] = measure(
                lambda: sandbox.tool("bash", command="echo hi"), n
            )
            rows["IPython print('hi') via execution server"] = measure(
                lambda: sandbox.tool("python", code="print('hi')"), n
            )
            rows["exec 'echo hi' (fresh bash in sandbox)"] = measure(lambda: sandbox.exec("echo hi"), n)
            uds = ExecClient(f"unix:{sandbox.info.socket_path}")
            rows["request round trip, UDS"] = measure(lambda: uds.call("ping"), n)
            uds.close()
        bare = BashSession(cwd=str(root))
        rows["bash echo, bare ptyprocess in-process"] = measure(lambda: bare.run("echo hi"), n)
        bare.close()
        if shutil.which("tmux"):
            tmux = TmuxShell()
            try:
                rows["baseline: tmux send-keys + capture-pane"] = measure(tmux.run, n)
            finally:
                tmux.close()
        rows["baseline: fresh subprocess bash -c per call"] = measure(
            lambda: subprocess.run(["bash", "-c", "echo hi"], capture_output=True), n
        )

        def start_stop() -> None:
            runtime.start(SandboxSpec()).stop()

        rows["sandbox start+stop (local, bwrap)"] = measure(start_stop, n, warmup=3)

        def start_exec_stop(network: bool) -> None:
            with runtime.start(SandboxSpec(network=network)) as sandbox:
                sandbox.exec("true")

        rows["start+first command+stop, network off"] = measure(lambda: start_exec_stop(False), n, warmup=3)
        if shutil.which("pasta"):
            rows["start+first command+stop, network (pasta)"] = measure(
                lambda: start_exec_stop(True), max(n // 4, 20), warmup=2
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report(rows, n)


def report(rows: dict[str, list[float]], n: int) -> None:
    tmux = rows.get("baseline: tmux send-keys + capture-pane")
    fresh = rows["baseline: fresh subprocess bash -c per call"]
    tmux_median = statistics.median(tmux) if tmux else float("nan")
    fresh_median = statistics.median(fresh)
    print(
        f"\nTool latency, {n} calls per row, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}\n"
    )
    header = f"{'backend':<46} {'median ms':>10} {'p90 ms':>8} {'vs tmux':>8} {'vs fresh':>9}"
    print(header)
    print("-" * len(header))
    for name, samples in rows.items():
        median = statistics.median(samples)
        p90 = statistics.quantiles(samples, n=10)[-1]
        ratios = f"{tmux_median / median:>7.1f}x {fresh_median / median:>8.1f}x"
        print(f"{name:<46} {median:>10.3f} {p90:>8.3f} {ratios}")
    bash = statistics.median(rows["bash echo via execution server (UDS)"])
    ipython = statistics.median(rows["IPython print('hi') via execution server"])
    start_stop = statistics.median(rows["sandbox start+stop (local, bwrap)"])
    print(
        "\nTargets: bash via server <= 1 ms and >= 10x faster than tmux; IPython <= 10 ms;"
        " start+stop <= 100 ms"
    )
    print(
        f"  bash {bash:.3f} ms ({'ok' if bash <= 1 else 'MISSED'}; {tmux_median / bash:.0f}x tmux), "
        f"IPython {ipython:.2f} ms ({'ok' if ipython <= 10 else 'MISSED'}), "
        f"start+stop {start_stop:.1f} ms ({'ok' if start_stop <= 100 else 'MISSED'})"
    )


if __name__ == "__main__":
    main()
