"""A small vLLM-shaped chat server for the gateway's integration tests (a real process over real HTTP).

It renders a ChatML-like template into byte-level token ids (<|im_start|>=1, <|im_end|>=2, byte b -> b+10),
so prompt ids, sampled ids and re-rendered history are exact and prefix merging can be checked end to end.
The reply is steered by the last user message: `CALL name {json}` calls a tool, `THINK a; SAY b` reasons
first, `OVERFLOW` answers vLLM's context-length 400, `LONG` runs into max_tokens; otherwise it echoes.
Run: python -m tests.gateway.fake_backend --port N [--fail-status 500]
"""

from __future__ import annotations

import argparse
import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

IM_START, IM_END = 1, 2
MODEL = "fake-policy"
MAX_CONTEXT = 100_000


def encode(text: str) -> list[int]:
    return [b + 10 for b in text.encode()]


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content if isinstance(p, dict))


def render_tool_call(name: str, arguments: Any) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def render_message(message: dict[str, Any]) -> list[int]:
    text = _content_text(message.get("content"))
    if message["role"] == "assistant":
        for call in message.get("tool_calls") or []:
            function = call["function"]
            text += render_tool_call(function["name"], json.loads(function["arguments"] or "{}"))
    return [IM_START, *encode(f"{message['role']}\n{text}"), IM_END, *encode("\n")]


def render_prompt(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[int]:
    ids: list[int] = []
    if tools:
        names = ",".join(t["function"]["name"] for t in tools)
        ids += [IM_START, *encode(f"tools\n{names}"), IM_END, *encode("\n")]
    for message in messages:
        ids += render_message(message)
    return [*ids, IM_START, *encode("assistant\n")]


def policy(messages: list[dict[str, Any]]) -> str:
    last = messages[-1]
    text = _content_text(last.get("content"))
    if last["role"] == "tool":
        return f"done: {text[:40]}"
    call = re.match(r"CALL (\w+) (\{.*\})", text, re.S)
    if call:
        return render_tool_call(call.group(1), json.loads(call.group(2)))
    think = re.match(r"THINK (.*); SAY (.*)", text, re.S)
    if think:
        return f"<think>{think.group(1)}</think>{think.group(2)}"
    if text.startswith("LONG"):
        return "x" * 500
    return f"echo: {text[:60]}"


def parse_output(text: str) -> tuple[str | None, str | None, list[dict[str, Any]]]:
    reasoning = None
    think = re.match(r"<think>(.*?)</think>(.*)", text, re.S)
    if think:
        reasoning, text = think.group(1), think.group(2)
    calls = []
    for match in re.finditer(r"<tool_call>\n(.*?)\n</tool_call>", text, re.S):
        payload = json.loads(match.group(1))
        calls.append(
            {
                "id": f"chatcmpl-tool-{uuid.uuid4().hex[:12]}",
                "type": "function",
                "function": {"name": payload["name"], "arguments": json.dumps(payload["arguments"])},
            }
        )
    content = re.sub(r"<tool_call>\n.*?\n</tool_call>", "", text, flags=re.S) or None
    return content, reasoning, calls


def _pieces(reasoning: str | None, content: str | None) -> list[dict[str, str]]:
    """Deltas as vLLM sends them: reasoning, then content in two parts."""
    out = [{"reasoning": reasoning}] if reasoning else []
    if content:
        half = len(content) // 2
        out += [{"content": part} for part in (content[:half], content[half:]) if part]
    return out


def _stream(
    prompt_ids: list[int],
    sampled: list[int],
    logprobs: list[dict[str, Any]],
    pieces: list[dict[str, str]],
    calls: list[dict[str, Any]],
    finish: str,
    body: dict[str, Any],
) -> Iterator[str]:
    """vLLM's streamed chat reply with return_token_ids: one chunk per sampled token, calls at the end."""
    head = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk", "model": MODEL}

    def chunk(choice: dict[str, Any] | None, **extra: Any) -> str:
        return f"data: {json.dumps({**head, 'choices': [choice] if choice else [], **extra})}\n\n"

    first = {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
    yield chunk(first, prompt_token_ids=prompt_ids)
    for i, token in enumerate(sampled):
        delta = pieces[i] if i < len(pieces) else {}
        last = i == len(sampled) - 1
        if last:
            for rest in pieces[i + 1 :]:
                for key, text in rest.items():
                    delta[key] = delta.get(key, "") + text
            if calls:
                delta["tool_calls"] = [{"index": n, **call} for n, call in enumerate(calls)]
        yield chunk(
            {
                "index": 0,
                "delta": delta,
                "logprobs": {"content": [logprobs[i]]},
                "token_ids": [token],
                "finish_reason": finish if last else None,
                "stop_reason": None,
            }
        )
    if (body.get("stream_options") or {}).get("include_usage"):
        usage = {"prompt_tokens": len(prompt_ids), "completion_tokens": len(sampled)}
        yield chunk(None, usage={**usage, "total_tokens": len(prompt_ids) + len(sampled)})
    yield "data: [DONE]\n\n"


def create_app(fail_status: int | None = None) -> FastAPI:
    app = FastAPI()

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {}  # vLLM answers 200 with an empty body once its engine runs

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": MODEL, "object": "model"}]}

    @app.post("/tokenize")
    async def tokenize(request: Request) -> dict[str, Any]:
        body = await request.json()
        ids = render_prompt(body["messages"], body.get("tools") or [])
        return {"count": len(ids), "max_model_len": MAX_CONTEXT, "tokens": ids}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        if fail_status:
            return JSONResponse({"error": {"message": "backend broken on purpose"}}, status_code=fail_status)
        body = await request.json()
        messages, tools = body["messages"], body.get("tools") or []
        if body.get("model") != MODEL:
            return JSONResponse(
                {"error": {"message": f"model {body.get('model')} not served"}}, status_code=404
            )
        if _content_text(messages[-1].get("content")).startswith("OVERFLOW"):
            message = (
                "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens "
                "(4000 in the messages, 1000 in the completion). Please reduce the length of the messages."
            )
            return JSONResponse(
                {"object": "error", "message": message, "type": "BadRequestError", "code": 400}, 400
            )
        prompt_ids = render_prompt(messages, tools)
        text = policy(messages)
        sampled = [*encode(text), IM_END]
        limit = int(body.get("max_tokens") or 256)
        finish = "stop"
        if len(sampled) > limit:
            sampled, finish = sampled[:limit], "length"
            text = bytes(t - 10 for t in sampled).decode(errors="ignore")
        content, reasoning, calls = parse_output(text)
        if calls and finish == "stop":
            finish = "tool_calls"
        logprobs = [
            {"token": f"token_id:{t}", "logprob": -((i % 7) + 1) / 100, "top_logprobs": []}
            for i, t in enumerate(sampled)
        ]
        if body.get("stream"):
            pieces = _pieces(reasoning, content)
            return StreamingResponse(
                _stream(prompt_ids, sampled, logprobs, pieces, calls, finish, body),
                media_type="text/event-stream",
            )
        return JSONResponse(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex}",
                "object": "chat.completion",
                "model": MODEL,
                "prompt_token_ids": prompt_ids,
                "choices": [
                    {
                        "index": 0,
                        "message": {
                            "role": "assistant",
                            "content": content,
                            "reasoning": reasoning,
                            "tool_calls": calls,
                        },
                        "logprobs": {"content": logprobs},
                        "finish_reason": finish,
                        "stop_reason": None,
                        "token_ids": sampled,
                    }
                ],
                "usage": {
                    "prompt_tokens": len(prompt_ids),
                    "completion_tokens": len(sampled),
                    "total_tokens": len(prompt_ids) + len(sampled),
                },
            }
        )

    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--fail-status", type=int, default=None)
    args = parser.parse_args()
    uvicorn.run(create_app(args.fail_status), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
