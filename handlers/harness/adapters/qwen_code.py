"""`qwen_code` (@qwen-code/qwen-code): OpenAI-compatible auth selected in ~/.qwen/settings.json with the
session as the model provider's base URL (chat completions), headless `-p` run in yolo approval mode."""

from __future__ import annotations

from typing import Any

from handlers.harness.adapters.base import HarnessAdapter, HarnessInputs, HarnessPlan, PlannedFile, to_json

KEY_VARIABLE = "FARM_GATEWAY_API_KEY"


class QwenCodeAdapter(HarnessAdapter):
    name = "qwen_code"
    executable = "qwen"

    def plan(self, inputs: HarnessInputs) -> HarnessPlan:
        config_dir = inputs.in_home(".qwen")
        model: dict[str, Any] = {
            "id": inputs.model,
            "name": inputs.model,
            "baseUrl": inputs.openai_base_url,
            "envKey": KEY_VARIABLE,
        }
        if inputs.context_window or inputs.max_output_tokens:
            generation: dict[str, Any] = {}
            if inputs.context_window:
                generation["contextWindowSize"] = inputs.context_window
            if inputs.max_output_tokens:
                generation["samplingParams"] = {"max_tokens": inputs.max_output_tokens}
            model["generationConfig"] = generation
        settings = {
            "modelProviders": {"openai": [model]},
            "security": {"auth": {"selectedType": "openai"}},
            "model": {"name": inputs.model},
            "tools": {"approvalMode": "yolo"},
            "general": {"enableAutoUpdate": False},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
        }
        env = {
            **self.base_env(inputs),
            "QWEN_CONFIG_DIR": config_dir,
            KEY_VARIABLE: inputs.api_key,
            # The environment route too, for releases that read only these.
            "OPENAI_API_KEY": inputs.api_key,
            "OPENAI_BASE_URL": inputs.openai_base_url,
            "OPENAI_MODEL": inputs.model,
        }
        argv = [*self.program(inputs), "--prompt", inputs.instruction, "--model", inputs.model]
        argv += ["--approval-mode", "yolo", "--output-format", "json"]
        config_file = PlannedFile(path=f"{config_dir}/settings.json", content=to_json(settings))
        return self.make_plan("openai_chat", [config_file], env, argv)
