"""`gemini_cli` (@google/gemini-cli): API-key auth selected in ~/.gemini/settings.json and the session as
GOOGLE_GEMINI_BASE_URL (the GenAI SDK then calls `{session}/v1beta/models/{model}:streamGenerateContent`;
the CLI accepts plain http only for localhost / 127.0.0.1). Headless `-p` in yolo approval mode, with the
CLI's own container sandbox (which yolo would otherwise switch on) and telemetry off."""

from __future__ import annotations

from typing import Any

from handlers.harness.adapters.base import HarnessAdapter, HarnessInputs, HarnessPlan, PlannedFile, to_json


class GeminiCliAdapter(HarnessAdapter):
    name = "gemini_cli"
    executable = "gemini"
    default_model = "gemini-2.5-pro"

    def plan(self, inputs: HarnessInputs) -> HarnessPlan:
        settings: dict[str, Any] = {
            "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
            "model": {"name": inputs.model},
            "tools": {"sandbox": False},
            "general": {"disableAutoUpdate": True},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
        }
        env = {
            **self.base_env(inputs),
            "GEMINI_CLI_HOME": inputs.home,
            "GOOGLE_GEMINI_BASE_URL": inputs.base_url,
            "GEMINI_API_KEY": inputs.api_key,
            "GEMINI_MODEL": inputs.model,
            "GEMINI_SANDBOX": "false",
            "GEMINI_CLI_TRUST_WORKSPACE": "true",
        }
        argv = [*self.program(inputs), "--prompt", inputs.instruction, "--model", inputs.model]
        argv += ["--approval-mode", "yolo", "--output-format", "json"]
        config_file = PlannedFile(path=inputs.in_home(".gemini", "settings.json"), content=to_json(settings))
        return self.make_plan("google", [config_file], env, argv)
