"""`claude_code` (@anthropic-ai/claude-code): Anthropic Messages at the session (Claude Code appends
`/v1/messages` to ANTHROPIC_BASE_URL), bearer auth through ANTHROPIC_AUTH_TOKEN with ANTHROPIC_API_KEY
empty (a non-empty key would win over the token), every model tier mapped to the one policy, print mode
with permission prompts bypassed (the farm's sandbox is the boundary)."""

from __future__ import annotations

from handlers.harness.adapters.base import HarnessAdapter, HarnessInputs, HarnessPlan, PlannedFile, to_json


class ClaudeCodeAdapter(HarnessAdapter):
    name = "claude_code"
    executable = "claude"
    default_model = "claude-sonnet-4-5"

    def plan(self, inputs: HarnessInputs) -> HarnessPlan:
        config_dir = inputs.in_home(".claude")
        model = inputs.model
        provider_env = {
            "ANTHROPIC_BASE_URL": inputs.base_url,
            "ANTHROPIC_AUTH_TOKEN": inputs.api_key,
            "ANTHROPIC_API_KEY": "",
            "ANTHROPIC_MODEL": model,
            "ANTHROPIC_SMALL_FAST_MODEL": model,
            "ANTHROPIC_DEFAULT_OPUS_MODEL": model,
            "ANTHROPIC_DEFAULT_SONNET_MODEL": model,
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": model,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
        }
        if inputs.max_output_tokens:
            provider_env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] = str(inputs.max_output_tokens)
        settings = {"env": provider_env, "permissions": {"defaultMode": "bypassPermissions"}}
        files = [
            PlannedFile(path=f"{config_dir}/settings.json", content=to_json(settings)),
            # Marks first-run onboarding as done so nothing waits for a terminal.
            PlannedFile(
                path=inputs.in_home(".claude.json"), content=to_json({"hasCompletedOnboarding": True})
            ),
        ]
        env = {
            **self.base_env(inputs),
            **provider_env,
            "CLAUDE_CONFIG_DIR": config_dir,
            # Claude Code refuses to skip permissions as root unless told it runs in a sandbox.
            "IS_SANDBOX": "1",
        }
        argv = [*self.program(inputs), "--print", inputs.instruction, "--model", model]
        argv += ["--output-format", "json", "--dangerously-skip-permissions"]
        return self.make_plan("anthropic", files, env, argv)
