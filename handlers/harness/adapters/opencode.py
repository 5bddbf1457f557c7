"""`opencode` (opencode-ai): a custom provider built on `@ai-sdk/openai-compatible` in the global
opencode.json (chat completions at the session), selected as `farm/<model>`, run with `opencode run`;
edits and shell commands are allowed without asking, autoupdate and sharing are off."""

from __future__ import annotations

from typing import Any

from handlers.harness.adapters.base import HarnessAdapter, HarnessInputs, HarnessPlan, PlannedFile, to_json

PROVIDER = "farm"


class OpencodeAdapter(HarnessAdapter):
    name = "opencode"
    executable = "opencode"

    def plan(self, inputs: HarnessInputs) -> HarnessPlan:
        config_home = inputs.in_home(".config")
        config_path = f"{config_home}/opencode/opencode.json"
        model: dict[str, Any] = {"name": inputs.model}
        if inputs.context_window and inputs.max_output_tokens:
            model["limit"] = {"context": inputs.context_window, "output": inputs.max_output_tokens}
        config = {
            "$schema": "https://opencode.ai/config.json",
            "provider": {
                PROVIDER: {
                    "npm": "@ai-sdk/openai-compatible",
                    "name": "rollout-farm gateway",
                    "options": {"baseURL": inputs.openai_base_url, "apiKey": inputs.api_key},
                    "models": {inputs.model: model},
                }
            },
            "model": f"{PROVIDER}/{inputs.model}",
            "small_model": f"{PROVIDER}/{inputs.model}",
            "permission": {
                "edit": "allow",
                "bash": "allow",
                "webfetch": "deny",
                "external_directory": "allow",
            },
            "autoupdate": False,
            "share": "disabled",
        }
        env = {
            **self.base_env(inputs),
            "XDG_CONFIG_HOME": config_home,
            "OPENCODE_CONFIG": config_path,
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
        }
        argv = [*self.program(inputs), "run", "--model", f"{PROVIDER}/{inputs.model}", inputs.instruction]
        config_file = PlannedFile(path=config_path, content=to_json(config))
        return self.make_plan("openai_chat", [config_file], env, argv)
