"""One node of a multi-node test: started as the first process of the node's own pid namespace (see
bench/netlab/netlab.py), it starts the node's Celery workers, reaps every process that ends up its child
(sandboxes whose worker died are re-parented to it), and on SIGTERM stops the workers as systemd would:
SIGTERM (they give their stages back), then SIGKILL after a grace period. SIGKILL to it is the host
dying: the kernel kills every process of the pid namespace.

`python -m bench.netlab.node_main --app bench.netlab.probe_app init:8 run:48 eval:8`"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--app", default="farm")
    parser.add_argument("workers", nargs="+", help="queue[,queue]:concurrency")
    args = parser.parse_args()
    node = os.environ["FARM_NODE"]
    workers: dict[int, subprocess.Popen[bytes]] = {}
    for i, spec in enumerate(args.workers):
        queues, concurrency = spec.rsplit(":", 1)
        argv = [sys.executable, "-m", "celery", "-A", args.app, "worker", "-Q", queues, "-P", "threads"]
        argv += ["-c", concurrency, "-n", f"{queues.replace(',', '+')}-{i}-{node}@%h", "-l", "warning"]
        argv += ["--without-gossip", "--without-mingle", "--heartbeat-interval", "10"]
        proc = subprocess.Popen(argv)
        workers[proc.pid] = proc
    stopping = {"at": 0.0}

    def stop(signum: int, frame: object) -> None:
        stopping["at"] = time.monotonic()
        for proc in workers.values():
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    alive = set(workers)
    while alive:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            if stopping["at"] and time.monotonic() - stopping["at"] > 15:
                for p in alive:
                    os.kill(p, signal.SIGKILL)
            time.sleep(0.2)
            continue
        if pid in alive:
            alive.discard(pid)
            workers[pid].returncode = os.waitstatus_to_exitcode(status)
    # whatever is left in the namespace (a sandbox nobody stopped) dies with this process, its init


if __name__ == "__main__":
    main()
