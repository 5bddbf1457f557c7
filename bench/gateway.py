"""Gateway benchmark: added latency, first-chunk latency, a side-by-side run against rllm-model-gateway, and
trainer-facing volume of per_request vs prefix_merging.

Starts a private redis-server, the reference LLM server (`python -m farm.llm serve --policy scripted`),
a second one paced at --token-latency-ms (so streaming is visible), a `farm gateway` in front of each and
rllm-model-gateway (installed from PyPI into a bench-private directory if missing; it is not a project
dependency), all on loopback. Parts:
1. added latency: identical chat calls direct / through farm (chat, messages) / through rllm, interleaved so
   all see the same machine load; goal farm added p50 <= 0.8x rllm's.
2. first chunk: streamed chat against the paced backend, time to the first content token direct vs through
   farm; goal farm <= backend + 2 ms (median).
3. throughput at 32 concurrent callers, farm and rllm in alternating rounds; goal farm >= 1.5x rllm.
4. a 50-call harness-like session (a main agent that compacts once, plus a sub-agent), both builders.

Run: python bench/gateway.py [--calls 300] [--seconds 4] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import parse_quick
from farm.children import spawn
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


RLLM_DIR = Path.home() / ".cache" / "rollout-farm" / "bench" / "rllm-model-gateway"
"""Where the bench installs rllm-model-gateway (and aiosqlite, its store's driver) when they are missing."""


def _rllm_env() -> dict[str, str]:
    """An environment in which `python -m rllm_model_gateway` runs, installing it privately if needed."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(RLLM_DIR), os.environ.get("PYTHONPATH", "")])}
    probe = [sys.executable, "-c", "import rllm_model_gateway, aiosqlite"]
    if subprocess.run(probe, env=env, capture_output=True).returncode != 0:
        wheels = sorted(Path("/tmp/rllm").glob("rllm_model_gateway-*.whl"))
        source = str(wheels[-1]) if wheels else "rllm-model-gateway"
        install = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(RLLM_DIR)]
        subprocess.run([*install, source, "aiosqlite"], check=True)
    return env


def _spawn(args: list[str], ready_url: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    process = spawn([sys.executable, *args], stdout=subprocess.DEVNULL, env=env)
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


Call = tuple[str, str, dict[str, Any]]
"""(name, url, body) of one way to make the same model call."""


def _paths(
    client: httpx.Client, backend: str, farm_url: str, rllm_url: str | None, question: str = "What is 2+2?"
) -> list[Call]:
    """(name, url, body) per path; farm and rllm get the same body (each adds logprobs and token ids)."""
    messages = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": question},
    ]
    model = client.get(f"{backend}/models").json()["data"][0]["id"]
    body = {"model": model, "messages": messages, "max_tokens": 16}
    direct = {**body, "logprobs": True, "top_logprobs": 0, "return_token_ids": True}
    anthropic = {
        "model": "claude",
        "max_tokens": 16,
        "messages": messages[1:],
        "system": messages[0]["content"],
    }
    paths = [
        ("direct backend", f"{backend}/chat/completions", direct),
        ("farm chat", f"{farm_url}/v1/chat/completions", body),
        ("farm messages", f"{farm_url}/v1/messages", anthropic),
    ]
    if rllm_url:
        paths.append(("rllm chat", f"{rllm_url}/chat/completions", body))
    return paths


def latency(client: httpx.Client, paths: list[Call], calls: int) -> dict[str, list[float]]:
    """Milliseconds per sequential call on each path, interleaved call by call."""
    runs: dict[str, list[float]] = {name: [] for name, _, _ in paths}
    for i in range(calls + 10):
        for name, url, body in paths:
            started = time.perf_counter()
            client.post(url, json=body).raise_for_status()
            if i >= 10:  # warm-up
                runs[name].append((time.perf_counter() - started) * 1000)
    return runs


def _first_content_ms(client: httpx.Client, url: str, body: dict[str, Any]) -> float:
    """Milliseconds from sending a streamed chat request to its first non-empty content delta."""
    first = float("nan")
    started = time.perf_counter()
    with client.stream("POST", url, json={**body, "stream": True}) as response:
        response.raise_for_status()
        for line in response.iter_lines():  # read to the end either way: the gateway records at the end
            if first == first or not line.startswith("data:") or line.endswith("[DONE]"):
                continue
            choices = json.loads(line[5:]).get("choices") or [{}]
            if (choices[0].get("delta") or {}).get("content"):
                first = (time.perf_counter() - started) * 1000
    return first


def first_chunk(client: httpx.Client, paths: list[Call], calls: int) -> dict[str, list[float]]:
    runs: dict[str, list[float]] = {name: [] for name, _, _ in paths}
    for i in range(calls + 5):
        for name, url, body in paths:
            value = _first_content_ms(client, url, body)
            if i >= 5:
                runs[name].append(value)
    return runs


async def _load(urls: list[str], body: dict[str, Any], seconds: float) -> float:
    """Requests per second with one caller per URL (each its own session), closed loop, for `seconds`."""
    import aiohttp  # the bench extra: a lean client, so load generation does not eat the gateways' CPU

    connector = aiohttp.TCPConnector(limit=len(urls))
    async with aiohttp.ClientSession(connector=connector) as http:
        done = 0
        deadline = time.perf_counter() + seconds

        async def caller(url: str) -> None:
            nonlocal done
            while time.perf_counter() < deadline:
                async with http.post(url, json=body) as response:
                    await response.read()
                    if response.status != 200:
                        raise RuntimeError(f"{url}: HTTP {response.status}")
                done += 1

        started = time.perf_counter()
        await asyncio.gather(*(caller(url) for url in urls))
        return done / (time.perf_counter() - started)


def throughput(
    targets: dict[str, tuple[list[str], dict[str, Any]]], seconds: float, rounds: int
) -> dict[str, float]:
    """Median req/s per target over `rounds` alternating rounds (after a short warm-up of each)."""
    for urls, body in targets.values():
        asyncio.run(_load(urls, body, 0.5))
    runs: dict[str, list[float]] = {name: [] for name in targets}
    for _ in range(rounds):
        for name, (urls, body) in targets.items():
            runs[name].append(asyncio.run(_load(urls, body, seconds)))
    return {name: statistics.median(values) for name, values in runs.items()}


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


def _table(title: str, runs: dict[str, list[float]], base_name: str) -> float:
    """Print p50 / p90 per path and the p50 added over `base_name`; returns the base p50."""
    base = statistics.median(runs[base_name])
    print(f"\n{title}")
    print(f"{'path':<20}{'p50':>9}{'p90':>9}{'added p50':>11}")
    for name, values in runs.items():
        p50 = statistics.median(values)
        print(f"{name:<20}{p50:>9.2f}{_pct(values, 0.9):>9.2f}{p50 - base:>11.2f}")
    return base


def _print_volume(volume: dict[str, dict[str, float]]) -> None:
    print("\nA recorded 50-call session (main agent with one compaction + a 10-call sub-agent)")
    keys = list(volume["per_request"])
    print(f"{'builder':<16}" + "".join(f"{k:>18}" for k in keys))
    for builder, row in volume.items():
        print(f"{builder:<16}" + "".join(f"{row[k]:>18.0f}" for k in keys))
    ratio = volume["per_request"]["trainer tokens"] / max(1.0, volume["prefix_merging"]["trainer tokens"])
    print(f"per_request / prefix_merging trainer tokens: {ratio:.1f}x")


def _sessions(client: httpx.Client, gateway: str, rllm: str | None, n: int) -> tuple[list[str], list[str]]:
    """n farm session URLs and n rllm session URLs (base URLs ending in /v1 for rllm)."""
    farm = [client.post(f"{gateway}/gateway/sessions", json={}).json()["base_url"] for _ in range(n)]
    peer = (
        [f"{rllm}{client.post(f'{rllm}/sessions', json={}).json()['url']}" for _ in range(n)] if rllm else []
    )
    return farm, peer


def _verdict(ratio: float, goal: str) -> str:
    op, value = goal.split()
    return "met" if (ratio <= float(value) if op == "<=" else ratio >= float(value)) else "MISSED"


def _side_by_side(latencies: dict[str, list[float]], rates: dict[str, float]) -> None:
    base = statistics.median(latencies["direct backend"])
    farm_added = statistics.median(latencies["farm chat"]) - base
    rllm_added = statistics.median(latencies["rllm chat"]) - base
    rows = [
        ("added latency p50 (ms)", farm_added, rllm_added, "<= 0.8"),
        ("req/s, 32 concurrent", rates["farm chat"], rates["rllm chat"], ">= 1.5"),
    ]
    print("\nfarm gateway vs rllm-model-gateway (same backend, same request, interleaved)")
    print(f"{'metric':<24}{'farm':>10}{'rllm':>10}{'farm/rllm':>11}{'goal':>9}")
    for label, farm, rllm, goal in rows:
        ratio = farm / rllm if rllm else float("inf")
        print(f"{label:<24}{farm:>10.2f}{rllm:>10.2f}{ratio:>11.2f}{goal:>9}  {_verdict(ratio, goal)}")
    print(f"(direct backend: p50 {base:.2f} ms, {rates['direct backend']:.0f} req/s at 32 concurrent)")


def _start(args: argparse.Namespace, tmp: str, redis_url: str) -> dict[str, Any]:
    """Backends (plain and paced), farm gateway and (unless --no-rllm) rllm-model-gateway."""
    procs: dict[str, Any] = {}
    ports = {name: free_port() for name in ("llm", "paced", "gateway", "paced_gateway", "rllm")}
    urls = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
    serve = ["-m", "farm.llm", "serve", "--policy", "scripted"]
    procs["llm"] = _spawn([*serve, "--port", str(ports["llm"])], f"{urls['llm']}/v1/models")
    paced = [*serve, "--port", str(ports["paced"]), "--token-latency-ms", str(args.token_latency_ms)]
    procs["paced"] = _spawn(paced, f"{urls['paced']}/v1/models")
    for name, backend in (("gateway", "llm"), ("paced_gateway", "paced")):
        gateway = ["-m", "farm.gateway.cli", "--port", str(ports[name]), "--redis-url", redis_url]
        procs[name] = _spawn([*gateway, "--backend", f"{urls[backend]}/v1"], f"{urls[name]}/healthz")
    if not args.no_rllm:
        rllm = ["-m", "rllm_model_gateway", "--host", "127.0.0.1", "--port", str(ports["rllm"])]
        rllm += ["--worker", f"{urls['llm']}/v1", "--db-path", f"{tmp}/rllm.db", "--log-level", "warning"]
        procs["rllm"] = _spawn(rllm, f"{urls['rllm']}/health", env=_rllm_env())
    return {"procs": procs, "urls": urls}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--stream-calls", type=int, default=150)
    parser.add_argument("--token-latency-ms", type=float, default=20.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-rllm", action="store_true", help="Skip rllm-model-gateway.")
    args = parse_quick(parser, calls=30, stream_calls=15, seconds=1.0, rounds=1, no_rllm=True)
    redis_server = EmbeddedRedis().start()
    with tempfile.TemporaryDirectory() as tmp:
        started = _start(args, tmp, redis_server.url)
        try:
            _run(args, started["urls"])
        finally:
            for process in reversed(started["procs"].values()):
                process.terminate()
                process.wait(timeout=10)
            redis_server.stop()


def _run(args: argparse.Namespace, urls: dict[str, str]) -> None:
    rllm = None if args.no_rllm else urls["rllm"]
    with httpx.Client(timeout=60) as client:
        (farm_url,), rllm_urls = _sessions(client, urls["gateway"], rllm, 1)
        (paced_farm,), _ = _sessions(client, urls["paced_gateway"], None, 1)
        paths = _paths(client, f"{urls['llm']}/v1", farm_url, rllm_urls[0] if rllm_urls else None)
        latencies = latency(client, paths, args.calls)
        _table(f"Latency per call, {args.calls} sequential calls each (ms)", latencies, "direct backend")
        # A question the scripted policy answers in prose: content streams token by token (an arithmetic
        # question is answered with a tool call, which backends hold until it is complete).
        paced = _paths(client, f"{urls['paced']}/v1", paced_farm, None, "Describe the weather.")
        streams = first_chunk(client, [paced[0], paced[1]], args.stream_calls)
        base = _table(
            f"First content chunk, streamed, backend paced at {args.token_latency_ms:g} ms/token (ms)",
            streams,
            "direct backend",
        )
        added = statistics.median(streams["farm chat"]) - base
        # Calls alternate direct/farm, so each pair saw the same load: a steadier view of the same gap.
        pairs = zip(streams["farm chat"], streams["direct backend"], strict=True)
        paired = statistics.median(farm - direct for farm, direct in pairs)
        verdict = "met" if added <= 2 else "MISSED"
        print(
            f"farm first chunk: backend + {added:.2f} ms (median of call pairs: + {paired:.2f} ms; "
            f"goal <= backend + 2 ms): {verdict}"
        )
        if rllm:
            body = paths[1][2]
            n = args.concurrency
            farm_many, rllm_many = _sessions(client, urls["gateway"], rllm, n)
            targets = {
                "direct backend": ([paths[0][1]] * n, paths[0][2]),
                "farm chat": ([f"{u}/v1/chat/completions" for u in farm_many], body),
                "rllm chat": ([f"{u}/chat/completions" for u in rllm_many], body),
            }
            _side_by_side(latencies, throughput(targets, args.seconds, args.rounds))
        _print_volume(session_volume(client, urls["gateway"]))


if __name__ == "__main__":
    main()
