"""A backend's streamed chat reply (vLLM dialect), folded chunk by chunk into text events and token capture.

Text and reasoning deltas are handed on as they arrive; a tool call is handed on whole once the backend
moves past it (a later call starts, or the stream ends). At the end the chunks are assembled into the same
shape as a non-streaming reply, so token capture is checked by the one parser (`parse_chat_reply`).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any, cast

from farm.gateway.normalized import ToolCall
from farm.gateway.upstream import ForwardResult, UpstreamReply, parse_chat_reply
from farm.inference.policy import (
    TRANSPORT_ERRORS,
    UNFINISHED_STREAM,
    UNREADABLE_CHUNK,
    Attempts,
    Failure,
    exchange_failure,
    finish_failure,
    stream_error_failure,
)

TextEvent = tuple[str, str]
"""("reasoning" | "content", text)."""
StreamEvent = TextEvent | ToolCall


@dataclass
class StreamAssembler:
    """Accumulates one streamed choice."""

    model: str = ""
    prompt_ids: list[int] = field(default_factory=list)
    response_ids: list[int] = field(default_factory=list)
    logprobs: list[dict[str, Any]] = field(default_factory=list)
    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    handed_on: int = 0
    """Calls (in index order) already handed on."""
    finish_reason: str | None = None
    stop_reason: Any = None
    usage: dict[str, Any] = field(default_factory=dict)
    sglext: dict[str, Any] = field(default_factory=dict)

    def feed(self, chunk: dict[str, Any]) -> list[StreamEvent]:
        self.model = self.model or str(chunk.get("model") or "")
        if chunk.get("prompt_token_ids"):
            self.prompt_ids = [int(t) for t in chunk["prompt_token_ids"]]
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        if chunk.get("sglext"):
            self.sglext = chunk["sglext"]  # SGLang streams its ids once, after the last token
        events: list[StreamEvent] = []
        for choice in chunk.get("choices") or []:
            if choice.get("prompt_token_ids"):
                self.prompt_ids = [int(t) for t in choice["prompt_token_ids"]]
            self.response_ids.extend(int(t) for t in choice.get("token_ids") or [])
            self.logprobs.extend((choice.get("logprobs") or {}).get("content") or [])
            delta = choice.get("delta") or {}
            reasoning = delta.get("reasoning") or delta.get("reasoning_content")
            if reasoning:
                self.reasoning.append(reasoning)
                events.append(("reasoning", reasoning))
            if delta.get("content"):
                self.content.append(delta["content"])
                events.append(("content", delta["content"]))
            for call in delta.get("tool_calls") or []:
                events += self._call_delta(call)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
                self.stop_reason = choice.get("stop_reason", choice.get("matched_stop"))
        return events

    def _call_delta(self, delta: dict[str, Any]) -> list[StreamEvent]:
        index = int(delta.get("index") or 0)
        call = self.calls.setdefault(index, {"id": None, "name": "", "arguments": ""})
        function = delta.get("function") or {}
        call["id"] = call["id"] or delta.get("id")
        call["name"] += function.get("name") or ""
        call["arguments"] += function.get("arguments") or ""
        return self._hand_on(below=index)

    def _hand_on(self, below: int | None = None) -> list[StreamEvent]:
        ready: list[StreamEvent] = []
        for index in sorted(self.calls):
            if index < self.handed_on or (below is not None and index >= below):
                continue
            call = self.calls[index]
            call["id"] = call["id"] or f"call_{uuid.uuid4().hex[:24]}"
            ready.append(ToolCall(id=call["id"], name=call["name"], arguments=call["arguments"]))
            self.handed_on = index + 1
        return ready

    def flush(self) -> list[StreamEvent]:
        """The calls not handed on yet (the stream has ended)."""
        return self._hand_on()

    def reply(self, completion_id: str) -> UpstreamReply:
        calls = [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for _, c in sorted(self.calls.items())
        ]
        message = {
            "role": "assistant",
            "content": "".join(self.content) or None,
            "reasoning": "".join(self.reasoning) or None,
            "tool_calls": calls,
        }
        choice = {
            "message": message,
            "logprobs": {"content": self.logprobs},
            "token_ids": self.response_ids or None,
            "finish_reason": self.finish_reason,
            "stop_reason": self.stop_reason,
        }
        data: dict[str, Any] = {
            "model": self.model,
            "prompt_token_ids": self.prompt_ids,
            "choices": [choice],
            "sglext": self.sglext,
            "usage": self.usage,
        }
        return parse_chat_reply(data, completion_id)


class _AttemptFailed(Exception):
    """The backend's own failure seen in its stream (an error event, an abort, a stream that ended without
    finishing, a chunk that is not JSON), judged by the policy."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.problem)
        self.failure = failure


Failed = Callable[[Failure, str, bool], Awaitable[tuple[Any, str, float]]]
"""(failure, backend, replied) -> (response, backend, seconds) of the next attempt; raises the call's error
when the policy ends the call instead (farm/gateway/forwarding.py acts on its steps)."""


class UpstreamStream:
    """An open streamed backend response (status already checked); iterate `events()`, then `reply()`.

    A failure while reading it goes to `failed` with whether an event has been handed on: until then the
    policy moves the call to the next backend (the client has seen nothing of the failed one); after it
    the call is cut."""

    def __init__(
        self,
        response: Any,
        address: str,
        attempts: Attempts,
        upstream_s: float,
        on_close: Callable[[str], None],
        failed: Failed,
    ) -> None:
        self._attempts = attempts
        self.upstream_s = upstream_s
        self._on_close = on_close
        self._failed = failed
        self.handed_on = False
        self._use(response, address)

    def _use(self, response: Any, address: str) -> None:
        self.response = response
        self.address = address
        self.assembler = StreamAssembler()
        self._lines = response.aiter_lines()
        self._closed = False
        self._started = time.perf_counter()
        self.done = False

    @property
    def attempts(self) -> int:
        return self._attempts.made

    async def next_chunk(self) -> dict[str, Any] | None:
        """The next JSON chunk, or None at `[DONE]` / the end of the body."""
        async for line in self._lines:
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                self.done = True
                return None
            try:
                chunk = json.loads(data)
            except json.JSONDecodeError:
                raise _AttemptFailed(UNREADABLE_CHUNK) from None
            if isinstance(chunk, dict) and "error" in chunk and "choices" not in chunk:
                error = chunk["error"]
                message = error.get("message") if isinstance(error, dict) else str(error)
                raise _AttemptFailed(stream_error_failure(str(message)))
            return cast(dict[str, Any], chunk)
        self.done = True
        return None

    async def events(self) -> AsyncIterator[list[StreamEvent]]:
        """Per backend chunk, the events it carries (often none); the held calls come last. A failure of the
        stream that ends the call comes out as the GatewayError the policy's verdict makes of it."""
        while True:
            try:
                async for events in self._events():
                    self.handed_on = self.handed_on or bool(events)
                    yield events
                return
            except _AttemptFailed as exc:
                failure = exc.failure
            except TRANSPORT_ERRORS as exc:
                failure = exchange_failure(exc)
            failed = self.address
            await self._close()
            response, address, spent = await self._failed(failure, failed, self.handed_on)
            self.upstream_s += spent
            self._use(response, address)

    async def _events(self) -> AsyncIterator[list[StreamEvent]]:
        while (chunk := await self.next_chunk()) is not None:
            events = self.assembler.feed(chunk)
            if (failure := finish_failure(self.assembler.finish_reason)) is not None:
                raise _AttemptFailed(failure)
            yield events
        if self.assembler.finish_reason is None:
            raise _AttemptFailed(UNFINISHED_STREAM)
        yield self.assembler.flush()

    def reply(self, completion_id: str) -> UpstreamReply:
        return self.assembler.reply(completion_id)

    def result(self, reply: UpstreamReply) -> ForwardResult:
        """The call served, once the stream is closed (closing adds the last read's time upstream)."""
        return ForwardResult(
            reply=reply,
            backend=self.address,
            upstream_s=self.upstream_s,
            attempts=self.attempts,
            registered_version=self._attempts.registered_version,
        )

    async def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.upstream_s += time.perf_counter() - self._started
        try:
            # Read whole or abandoned, the reply has told what it had to: failing to close it changes nothing.
            with suppress(*TRANSPORT_ERRORS):
                await self.response.aclose()
        finally:
            self._on_close(self.address)

    async def aclose(self) -> None:
        await self._close()
