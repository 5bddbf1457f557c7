"""`codex` (@openai/codex): a custom model provider in $CODEX_HOME/config.toml speaking the Responses API
(`wire_api = "responses"`, the only wire API recent releases accept) at `{session}/v1/responses`, run with
`codex exec`: no approvals, no nested sandbox (Codex's own landlock sandbox cannot stack inside the farm's
namespaces; the farm's sandbox is the boundary), no rollout files."""

from __future__ import annotations

from handlers.harness.adapters.base import HarnessAdapter, HarnessInputs, HarnessPlan, PlannedFile, to_toml

PROVIDER = "farm"
KEY_VARIABLE = "FARM_GATEWAY_API_KEY"


class CodexAdapter(HarnessAdapter):
    name = "codex"
    executable = "codex"
    default_model = "gpt-5-codex"

    def plan(self, inputs: HarnessInputs) -> HarnessPlan:
        codex_home = inputs.in_home(".codex")
        top = {
            "model": inputs.model,
            "model_provider": PROVIDER,
            "approval_policy": "never",
            "sandbox_mode": "danger-full-access",
            "model_context_window": inputs.context_window,
            "model_max_output_tokens": inputs.max_output_tokens,
        }
        provider = {
            "name": "rollout-farm gateway",
            "base_url": inputs.openai_base_url,
            "wire_api": "responses",
            "env_key": KEY_VARIABLE,
        }
        config = to_toml(top, {f"model_providers.{PROVIDER}": provider})
        env = {**self.base_env(inputs), "CODEX_HOME": codex_home, KEY_VARIABLE: inputs.api_key}
        argv = [*self.program(inputs), "exec", "--skip-git-repo-check", "--ephemeral"]
        argv += [
            "--dangerously-bypass-approvals-and-sandbox",
            "--cd",
            inputs.workspace,
            "--model",
            inputs.model,
        ]
        argv += [inputs.instruction]
        config_file = PlannedFile(path=f"{codex_home}/config.toml", content=config)
        return self.make_plan("openai_responses", [config_file], env, argv)
