"""Gateway benchmark: added latency per call, and trainer-facing volume of per_request vs prefix_merging.

Starts a private redis-server, the reference LLM server (`python -m farm.llm serve --policy scripted`) and
`farm gateway` pointed at it, all on loopback. Part 1 times identical chat calls made directly to the backend
and through the gateway (interleaved, so both see the same machine load) and reports medians; target: added
p50 <= 3 ms. Part 2 records a 50-call harness-like session (a main agent that compacts its context once,
plus an interleaved sub-agent) and exports it with both builders.

Run: python bench/gateway.py [--calls 300]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from typing import Any

import httpx

from farm.embedded_redis import EmbeddedRedis, free_port

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        },
    }
]


def _spawn(args: list[str], ready_url: str) -> subprocess.Popen[bytes]:
    process = subprocess.Popen([sys.executable, *args], stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(ready_url, timeout=0.5).status_code == 200:
                return process
        except httpx.HTTPError:
            time.sleep(0.1)
    process.kill()
    raise TimeoutError(ready_url)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def latency(
    client: httpx.Client, backend: str, session_url: str, calls: int
) -> list[tuple[str, list[float]]]:
    messages = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "What is 2+2?"},
    ]
    model = client.get(f"{backend}/models").json()["data"][0]["id"]
    direct_body = {
        "model": model,
        "messages": messages,
        "max_tokens": 16,
        "logprobs": True,
        "top_logprobs": 0,
        "return_token_ids": True,
    }
    anthropic_body = {
        "model": "claude",
        "max_tokens": 16,
        "messages": messages[1:],
        "system": messages[0]["content"],
    }
    runs: dict[str, list[float]] = {"direct backend": [], "gateway chat": [], "gateway messages": []}
    for i in range(calls + 10):
        for name, url, body in (
            ("direct backend", f"{backend}/chat/completions", direct_body),
            (
                "gateway chat",
                f"{session_url}/v1/chat/completions",
                {"model": "m", "messages": messages, "max_tokens": 16},
            ),
            ("gateway messages", f"{session_url}/v1/messages", anthropic_body),
        ):
            started = time.perf_counter()
            client.post(url, json=body).raise_for_status()
            if i >= 10:  # warm-up
                runs[name].append((time.perf_counter() - started) * 1000)
    return list(runs.items())


def _turn(client: httpx.Client, url: str, messages: list[dict[str, Any]], n: int) -> None:
    reply = client.post(
        f"{url}/v1/chat/completions",
        json={"model": "m", "messages": messages, "tools": TOOLS, "max_tokens": 48},
    )
    reply.raise_for_status()
    message = reply.json()["choices"][0]["message"]
    messages.append({k: v for k, v in message.items() if v is not None or k == "content"})
    if message.get("tool_calls"):
        messages.append(
            {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": f"ok {n}"}
        )
    else:
        messages.append({"role": "user", "content": f"Continue with step {n}."})


def session_volume(client: httpx.Client, gateway: str) -> dict[str, dict[str, float]]:
    created = client.post(f"{gateway}/gateway/sessions", json={"task_id": "bench"}).json()
    url = created["base_url"]
    main = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the bug."},
    ]
    sub = [
        {"role": "system", "content": "You are a search sub-agent."},
        {"role": "user", "content": "Find foo."},
    ]
    for n in range(50):
        if n == 25:  # the harness compacts: a fresh prompt with a summary replaces the history
            main = [main[0], {"role": "user", "content": "Summary of work so far: tests run, bug located."}]
        if 10 <= n < 20:
            _turn(client, url, sub, n)
        else:
            _turn(client, url, main, n)
    out: dict[str, dict[str, float]] = {}
    for builder in ("per_request", "prefix_merging"):
        traces = client.post(f"{url}/export", json={"builder": builder}).json()["traces"]
        out[builder] = {
            "traces": len(traces),
            "trainer tokens": sum(len(t["prompt_ids"]) + len(t["response_ids"]) for t in traces),
            "trainable tokens": sum(sum(t["loss_mask"]) for t in traces),
            "drift flagged": sum(bool(t["metadata"].get("retokenization_drift")) for t in traces),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    redis_server = EmbeddedRedis().start()
    llm_port, gw_port = free_port(), free_port()
    backend = f"http://127.0.0.1:{llm_port}/v1"
    llm = _spawn(
        ["-m", "farm.llm", "serve", "--policy", "scripted", "--port", str(llm_port)], f"{backend}/models"
    )
    gateway = f"http://127.0.0.1:{gw_port}"
    gw = _spawn(
        [
            "-m",
            "farm.gateway.cli",
            "--port",
            str(gw_port),
            "--redis-url",
            redis_server.url,
            "--backend",
            backend,
        ],
        f"{gateway}/healthz",
    )
    try:
        with httpx.Client(timeout=60) as client:
            session_url = client.post(f"{gateway}/gateway/sessions", json={}).json()["base_url"]
            runs = latency(client, backend, session_url, args.calls)
            base = statistics.median(runs[0][1])
            print(f"\nLatency per call, {args.calls} sequential calls each (ms)")
            print(f"{'path':<20}{'p50':>9}{'p90':>9}{'added p50':>11}{'ratio':>8}")
            for name, values in runs:
                p50 = statistics.median(values)
                print(f"{name:<20}{p50:>9.2f}{_pct(values, 0.9):>9.2f}{p50 - base:>11.2f}{p50 / base:>8.2f}")
            volume = session_volume(client, gateway)
            print("\nA recorded 50-call session (main agent with one compaction + a 10-call sub-agent)")
            keys = list(volume["per_request"])
            print(f"{'builder':<16}" + "".join(f"{k:>18}" for k in keys))
            for builder, row in volume.items():
                print(f"{builder:<16}" + "".join(f"{row[k]:>18.0f}" for k in keys))
            ratio = volume["per_request"]["trainer tokens"] / max(
                1.0, volume["prefix_merging"]["trainer tokens"]
            )
            print(f"per_request / prefix_merging trainer tokens: {ratio:.1f}x")
    finally:
        for process in (gw, llm):
            process.terminate()
            process.wait(timeout=10)
        redis_server.stop()


if __name__ == "__main__":
    main()
