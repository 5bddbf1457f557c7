"""`shell`: any command (`agent.command`) with every provider's standard base-URL variables pointing at
the session, so an SDK client or a harness that reads them needs no config file."""

from __future__ import annotations

from handlers.harness.adapters.base import HarnessAdapter, HarnessInputs, HarnessPlan, PlannedFile

INSTRUCTION_FILE = "instruction.txt"


class ShellAdapter(HarnessAdapter):
    name = "shell"
    executable = "bash"

    def plan(self, inputs: HarnessInputs) -> HarnessPlan:
        if not inputs.command:
            raise ValueError("command: the shell harness needs a command to run")
        instruction_path = inputs.in_home(INSTRUCTION_FILE)
        env = {
            **self.base_env(inputs),
            "FARM_INSTRUCTION": inputs.instruction,
            "FARM_INSTRUCTION_FILE": instruction_path,
            # OpenAI SDKs (Python, JS) and most OpenAI-compatible clients
            "OPENAI_BASE_URL": inputs.openai_base_url,
            "OPENAI_API_BASE": inputs.openai_base_url,
            "OPENAI_API_KEY": inputs.api_key,
            "OPENAI_MODEL": inputs.model,
            # Anthropic SDKs append /v1/messages themselves
            "ANTHROPIC_BASE_URL": inputs.base_url,
            "ANTHROPIC_API_KEY": inputs.api_key,
            "ANTHROPIC_MODEL": inputs.model,
            # google-genai appends /v1beta/models/...
            "GOOGLE_GEMINI_BASE_URL": inputs.base_url,
            "GEMINI_API_KEY": inputs.api_key,
            "GEMINI_MODEL": inputs.model,
        }
        instruction_file = PlannedFile(path=instruction_path, content=inputs.instruction)
        return self.make_plan("any", [instruction_file], env, ["bash", "-c", inputs.command])
