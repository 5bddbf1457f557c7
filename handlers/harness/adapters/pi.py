"""`pi` (@mariozechner/pi-coding-agent): a custom provider in ~/.pi/agent/models.json pointing at the
session (OpenAI chat completions by default), run once in print mode without a saved session."""

from __future__ import annotations

from typing import Any

from handlers.harness.adapters.base import (
    GatewayApi,
    HarnessAdapter,
    HarnessInputs,
    HarnessPlan,
    PlannedFile,
    to_json,
)

PROVIDER = "farm"
# pi's `api` names and the gateway API each one lands on.
PI_APIS: dict[str, GatewayApi] = {
    "openai-completions": "openai_chat",
    "openai-responses": "openai_responses",
    "anthropic-messages": "anthropic",
    "google-generative-ai": "google",
}
DEFAULT_API = "openai-completions"


class PiAdapter(HarnessAdapter):
    name = "pi"
    executable = "pi"

    def __init__(self, api: str = DEFAULT_API) -> None:
        if api not in PI_APIS:
            raise ValueError(f"pi api must be one of {sorted(PI_APIS)}")
        self.api = api

    def base_url_for(self, inputs: HarnessInputs) -> str:
        if self.api.startswith("openai"):
            return inputs.openai_base_url  # pi appends /chat/completions or /responses
        if self.api == "google-generative-ai":
            return f"{inputs.base_url}/v1beta"
        return inputs.base_url  # the Anthropic SDK appends /v1/messages

    def plan(self, inputs: HarnessInputs) -> HarnessPlan:
        model: dict[str, Any] = {
            "id": inputs.model,
            "name": inputs.model,
            "reasoning": False,
            "input": ["text"],
        }
        if inputs.context_window:
            model["contextWindow"] = inputs.context_window
        if inputs.max_output_tokens:
            model["maxTokens"] = inputs.max_output_tokens
        provider: dict[str, Any] = {
            "baseUrl": self.base_url_for(inputs),
            "api": self.api,
            "apiKey": inputs.api_key,
            "models": [model],
        }
        if self.api == "openai-completions":
            # vLLM-style servers: system prompt as `system`, no reasoning_effort parameter.
            provider["compat"] = {"supportsDeveloperRole": False, "supportsReasoningEffort": False}
        agent_dir = inputs.in_home(".pi", "agent")
        files = [
            PlannedFile(path=f"{agent_dir}/models.json", content=to_json({"providers": {PROVIDER: provider}}))
        ]
        if inputs.context_window:
            # Auto-compaction triggers at contextWindow - reserveTokens (default reserve 16384).
            reserve = min(16384, max(256, inputs.context_window // 4))
            keep = min(20000, max(512, inputs.context_window // 2))
            settings = {"compaction": {"enabled": True, "reserveTokens": reserve, "keepRecentTokens": keep}}
            files.append(PlannedFile(path=f"{agent_dir}/settings.json", content=to_json(settings)))
        env = {**self.base_env(inputs), "PI_CODING_AGENT_DIR": agent_dir, "PI_OFFLINE": "1"}
        argv = [*self.program(inputs), "--print", "--provider", PROVIDER, "--model", inputs.model]
        argv += ["--no-session", inputs.instruction]
        return self.make_plan(PI_APIS[self.api], files, env, argv)
