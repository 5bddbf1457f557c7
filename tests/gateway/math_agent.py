"""The math agent the gateway's token-faithfulness checks drive through a session: a `python` tool, a
question it may call it for, and one turn of the conversation."""

from __future__ import annotations

from typing import Any

import httpx
import openai

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "python",
            "description": "Run Python code.",
            "parameters": {
                "type": "object",
                "properties": {"code": {"type": "string"}},
                "required": ["code"],
            },
        },
    }
]
QUESTION = {"role": "user", "content": "What is 17 * 3? Use the tool if needed."}


def open_session(gateway: str, task_id: str) -> tuple[str, openai.OpenAI]:
    """A new session of the gateway at `gateway`: its base URL, and an OpenAI client of its /v1."""
    created = httpx.post(f"{gateway}/gateway/sessions", json={"task_id": task_id}).json()
    return created["base_url"], openai.OpenAI(
        base_url=created["base_url"] + "/v1", api_key="-", max_retries=0
    )


def agent_turn(client: openai.OpenAI, messages: list[Any], turn: int) -> None:
    """The model's reply (offered TOOLS) appended to `messages`, then the tool's answer to its call or,
    when it called none, a request to check again."""
    reply = client.chat.completions.create(model="any", messages=messages, tools=TOOLS, max_tokens=64)
    message = reply.choices[0].message
    messages.append(message.model_dump(exclude_none=True))
    if message.tool_calls:
        messages.append({"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": "51"})
    else:
        messages.append({"role": "user", "content": f"Check again ({turn})."})
