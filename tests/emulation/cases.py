"""The requests the emulation is compared on with the real vLLM, and what of each answer is compared: the
rules (status, finish and stop reasons, which keys are sent, whether a stop token's text is in `text`),
never a model's own tokens. The same function runs against the real server (record_vllm.py writes the
fixture) and the emulation (test_vllm_conformance.py replays it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

FARM_READS = frozenset({"text", "logprobs", "finish_reason", "stop_reason", "token_ids"})
"""The keys of a /v1/completions choice the farm reads (farm/inference/wire.py)."""


@dataclass(frozen=True)
class Server:
    root: str
    model: str
    window: int
    eos_id: int
    """The tokenizer's eos (vLLM's primary end: its stop_reason is None)."""
    end_ids: tuple[int, ...]
    """The generation config's other end ids (their stop_reason is the id)."""
    forced_stop: bool
    """The server honours logit_bias, so a stop on each end id can be forced (the real vLLM)."""


def _completion(server: Server, **body: Any) -> dict[str, Any]:
    return {"model": server.model, "prompt": "Hello", "max_tokens": 2, "temperature": 0, **body}


def _stop_facts(server: Server, answer: httpx.Response) -> dict[str, Any]:
    """A stop on a token: the token stays in token_ids, its text is left out, the stop reason is None for
    the primary eos and the id for any other generation-config end."""
    choice = answer.json()["choices"][0]
    ids = choice.get("token_ids") or []
    last = ids[-1] if ids else None
    return {
        "status": answer.status_code,
        "finish_reason": choice["finish_reason"],
        "ends_on_an_end_id": last in (server.eos_id, *server.end_ids),
        "stop_reason_rule": _stop_rule(choice["stop_reason"], last),
        "stop_text_in_text": False if last is None else _token_text(server, last) in choice["text"],
    }


def _stop_rule(stop_reason: object, last: int | None) -> str:
    if stop_reason is None:
        return "none"
    return "the id" if stop_reason == last else repr(stop_reason)


def _token_text(server: Server, token: int) -> str:
    answer = httpx.post(
        f"{server.root}/detokenize", json={"model": server.model, "tokens": [token]}, timeout=60
    )
    return str(answer.json()["prompt"])


def run_cases(server: Server) -> dict[str, dict[str, Any]]:
    facts: dict[str, dict[str, Any]] = {}
    with httpx.Client(timeout=300) as http:
        version = http.get(f"{server.root}/version")
        facts["version"] = {"status": version.status_code, "keys": sorted(version.json())}

        unknown = http.post(
            f"{server.root}/v1/completions", json={**_completion(server), "model": "no-such-model"}
        )
        error = unknown.json().get("error") or {}
        facts["unknown_model"] = {
            "status": unknown.status_code,
            "error_keys": sorted(error),
            "type": error.get("type"),
            "param": error.get("param"),
            "code": error.get("code"),
        }

        shaped = http.post(
            f"{server.root}/v1/completions", json=_completion(server, logprobs=0, return_token_ids=True)
        )
        choice = shaped.json()["choices"][0]
        logprobs = choice["logprobs"]
        facts["completion"] = {
            "status": shaped.status_code,
            "farm_keys": sorted(
                {"text", "logprobs", "finish_reason", "stop_reason", "token_ids"} & set(choice)
            ),
            "logprobs_keys": sorted(logprobs),
            "aligned": len(logprobs["token_logprobs"]) == len(choice["token_ids"]) == len(logprobs["tokens"]),
        }

        # A prompt 4 tokens short of the window asking for 16: vLLM 0.32 grants the 4 left.
        long_prompt = [server.eos_id] * (server.window - 4)
        over = http.post(
            f"{server.root}/v1/completions",
            json=_completion(
                server, prompt=long_prompt, max_tokens=16, ignore_eos=True, return_token_ids=True
            ),
        )
        over_choice = over.json()["choices"][0] if over.status_code == 200 else {}
        facts["over_window_clamped"] = {
            "status": over.status_code,
            "finish_reason": over_choice.get("finish_reason"),
            "tokens_left_in_window": len(over_choice.get("token_ids") or []) == 4,
        }

        long = http.post(
            f"{server.root}/v1/completions",
            json=_completion(server, prompt=[server.eos_id] * (server.window + 1), max_tokens=1),
        )
        facts["prompt_over_window"] = {
            "status": long.status_code,
            "mentions_the_window": f"maximum context length is {server.window}" in long.text,
        }

        chat = http.post(
            f"{server.root}/v1/chat/completions",
            json={"model": server.model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2},
        )
        message = chat.json()["choices"][0]["message"]
        facts["chat_without_tools"] = {"status": chat.status_code, "tool_calls_key": "tool_calls" in message}

        if server.forced_stop:
            for name, end in (("stop_on_eos", server.eos_id), *((f"stop_on_end_{i}", e) for i, e in
                                                                enumerate(server.end_ids))):  # fmt: skip
                body = _completion(server, max_tokens=3, logit_bias={str(end): 100}, return_token_ids=True,
                                   skip_special_tokens=False)  # fmt: skip
                facts[name] = _stop_facts(server, http.post(f"{server.root}/v1/completions", json=body))
    return facts


def stop_facts_unforced(server: Server, prompt: list[int]) -> dict[str, Any]:
    """A stop the server reaches by itself (the emulation's scripted answers end on their turn end)."""
    body = {"model": server.model, "prompt": prompt, "max_tokens": 64, "temperature": 0,
            "return_token_ids": True, "skip_special_tokens": False}  # fmt: skip
    return _stop_facts(server, httpx.post(f"{server.root}/v1/completions", json=body, timeout=120))
