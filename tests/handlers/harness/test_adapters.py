"""Every adapter's plan: config files in the harness's own format, env, commands, and a provider URL that
lands on one of the gateway's canonical per-session routes."""

from __future__ import annotations

import json
import shlex
import tomllib
from urllib.parse import urlsplit

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from farm.gateway.app import router
from handlers.harness.adapters import (
    ADAPTERS,
    HarnessInputs,
    HarnessPlan,
    adapter_names,
    get_adapter,
)
from handlers.harness.adapters.base import to_toml

BASE = "http://127.0.0.1:8123/gateway/sessions/s3ss10n"
CANONICAL = [r for r in router.routes if getattr(r, "name", "") != "detected_provider_call"]


def inputs(**overrides: object) -> HarnessInputs:
    values: dict[str, object] = {
        "base_url": BASE + "/",
        "model": "policy-7b",
        "instruction": "Fix the bug in calc.py; don't touch tests.",
        "home": "/tmp/farm-harness/home",
    }
    return HarnessInputs(**(values | overrides))


def served_route(url: str) -> str:
    """The name of the canonical gateway route a full request URL hits (fails when none does)."""
    parts = urlsplit(url)
    assert f"{parts.scheme}://{parts.netloc}" == "http://127.0.0.1:8123", url
    for route in CANONICAL:
        if route.path_regex.match(parts.path) and "POST" in route.methods:
            return route.name
    raise AssertionError(f"the gateway serves no canonical route at {parts.path}")


def plan_of(name: str, **overrides: object) -> HarnessPlan:
    return get_adapter(name).plan(inputs(**overrides))


def test_registry_has_every_harness_of_the_task_api() -> None:
    from typing import get_args

    from farm.models.tasks import HarnessName

    assert set(adapter_names()) == set(get_args(HarnessName))
    assert all(ADAPTERS[name].name == name for name in ADAPTERS)


def test_unknown_harness_and_bad_options() -> None:
    with pytest.raises(KeyError, match="unknown harness 'aider'"):
        get_adapter("aider")
    with pytest.raises(ValueError, match="harness_options"):
        get_adapter("pi", {"api": "carrier-pigeon"})
    with pytest.raises(ValueError, match="harness_options"):
        get_adapter("codex", {"colour": "blue"})


@pytest.mark.parametrize("name", sorted(set(ADAPTERS) - {"shell"}))
def test_named_harness_files_live_in_home_and_command_carries_the_instruction(name: str) -> None:
    plan = plan_of(name)
    assert plan.harness == name
    assert plan.files, "every named harness gets a config file"
    assert all(f.path.startswith("/tmp/farm-harness/home/") for f in plan.files)
    assert plan.env["HOME"] == "/tmp/farm-harness/home"
    assert plan.env["FARM_GATEWAY_BASE_URL"] == BASE
    [argv] = plan.commands
    assert argv[0] == ADAPTERS[name].executable
    assert argv.count(inputs().instruction) == 1
    assert shlex.split(plan.script()) == argv


@pytest.mark.parametrize("name", sorted(set(ADAPTERS) - {"shell"}))
def test_user_command_replaces_only_the_program(name: str) -> None:
    default = plan_of(name).commands[0]
    custom = plan_of(name, command="node '/opt/my harness/cli.js'").commands[0]
    assert custom[:2] == ["node", "/opt/my harness/cli.js"]
    assert custom[2:] == default[1:]


def test_pi_models_json_points_at_chat_completions() -> None:
    plan = plan_of("pi", context_window=8192, max_output_tokens=1024)
    models = json.loads(plan.file("/tmp/farm-harness/home/.pi/agent/models.json").content)
    provider = models["providers"]["farm"]
    assert provider["api"] == "openai-completions"
    assert provider["compat"] == {"supportsDeveloperRole": False, "supportsReasoningEffort": False}
    assert provider["models"] == [
        {
            "id": "policy-7b",
            "name": "policy-7b",
            "reasoning": False,
            "input": ["text"],
            "contextWindow": 8192,
            "maxTokens": 1024,
        }
    ]
    assert served_route(provider["baseUrl"] + "/chat/completions") == "openai_chat_completions"
    settings = json.loads(plan.file("/tmp/farm-harness/home/.pi/agent/settings.json").content)
    compaction = settings["compaction"]
    assert compaction["reserveTokens"] < 8192 and compaction["keepRecentTokens"] < 8192
    assert plan.env["PI_CODING_AGENT_DIR"] == "/tmp/farm-harness/home/.pi/agent"
    argv = plan.commands[0]
    assert argv[argv.index("--provider") + 1] == "farm" and argv[argv.index("--model") + 1] == "policy-7b"
    assert {"--print", "--no-session"} <= set(argv)
    assert plan.api == "openai_chat"


@pytest.mark.parametrize(
    ("api", "suffix", "route", "gateway_api"),
    [
        ("openai-responses", "/responses", "openai_responses", "openai_responses"),
        ("anthropic-messages", "/v1/messages", "anthropic_messages", "anthropic"),
        ("google-generative-ai", "/models/policy-7b:streamGenerateContent", "google_generate", "google"),
    ],
)
def test_pi_other_apis(api: str, suffix: str, route: str, gateway_api: str) -> None:
    plan = get_adapter("pi", {"api": api}).plan(inputs())
    provider = json.loads(plan.files[0].content)["providers"]["farm"]
    assert provider["api"] == api and "compat" not in provider
    assert served_route(provider["baseUrl"] + suffix) == route
    assert plan.api == gateway_api
    assert len(plan.files) == 1, "no settings.json without a context window"


def test_codex_config_toml_declares_a_responses_provider() -> None:
    plan = plan_of("codex", context_window=32768)
    config = tomllib.loads(plan.file("/tmp/farm-harness/home/.codex/config.toml").content)
    assert config["model"] == "policy-7b" and config["model_provider"] == "farm"
    assert config["model_context_window"] == 32768 and "model_max_output_tokens" not in config
    provider = config["model_providers"]["farm"]
    assert provider["wire_api"] == "responses"
    assert plan.env[provider["env_key"]] == "farm-gateway"
    assert served_route(provider["base_url"] + "/responses") == "openai_responses"
    assert plan.env["CODEX_HOME"] == "/tmp/farm-harness/home/.codex"
    argv = plan.commands[0]
    assert argv[:2] == ["codex", "exec"]
    assert {"--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox"} <= set(argv)
    assert argv[argv.index("--cd") + 1] == "/workspace"
    assert plan.api == "openai_responses"


def test_claude_code_env_and_settings() -> None:
    plan = plan_of("claude_code", model="claude-sonnet-4-5", max_output_tokens=2048)
    env = plan.env
    assert served_route(env["ANTHROPIC_BASE_URL"] + "/v1/messages") == "anthropic_messages"
    assert env["ANTHROPIC_AUTH_TOKEN"] == "farm-gateway" and env["ANTHROPIC_API_KEY"] == ""
    for tier in ("ANTHROPIC_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL", "ANTHROPIC_SMALL_FAST_MODEL"):
        assert env[tier] == "claude-sonnet-4-5"
    assert env["IS_SANDBOX"] == "1" and env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "2048"
    settings = json.loads(plan.file("/tmp/farm-harness/home/.claude/settings.json").content)
    assert settings["env"]["ANTHROPIC_BASE_URL"] == BASE
    assert settings["permissions"]["defaultMode"] == "bypassPermissions"
    onboarding = json.loads(plan.file("/tmp/farm-harness/home/.claude.json").content)
    assert onboarding == {"hasCompletedOnboarding": True}
    argv = plan.commands[0]
    assert argv[argv.index("--print") + 1] == inputs().instruction
    assert "--dangerously-skip-permissions" in argv
    assert plan.api == "anthropic"


def test_qwen_code_settings_select_openai_auth() -> None:
    plan = plan_of("qwen_code", context_window=8192, max_output_tokens=512)
    settings = json.loads(plan.file("/tmp/farm-harness/home/.qwen/settings.json").content)
    assert settings["security"]["auth"]["selectedType"] == "openai"
    assert settings["model"]["name"] == "policy-7b"
    [model] = settings["modelProviders"]["openai"]
    assert model["id"] == "policy-7b" and plan.env[model["envKey"]] == "farm-gateway"
    assert model["generationConfig"] == {"contextWindowSize": 8192, "samplingParams": {"max_tokens": 512}}
    assert served_route(model["baseUrl"] + "/chat/completions") == "openai_chat_completions"
    assert plan.env["OPENAI_BASE_URL"] == model["baseUrl"]
    argv = plan.commands[0]
    assert argv[argv.index("--approval-mode") + 1] == "yolo"
    assert argv[argv.index("--prompt") + 1] == inputs().instruction


def test_gemini_cli_uses_the_genai_base_url_without_its_own_sandbox() -> None:
    plan = plan_of("gemini_cli")
    url = plan.env["GOOGLE_GEMINI_BASE_URL"] + "/v1beta/models/gemini-2.5-pro:streamGenerateContent"
    assert served_route(url + "?alt=sse") == "google_generate"
    assert plan.env["GEMINI_SANDBOX"] == "false" and plan.env["GEMINI_API_KEY"] == "farm-gateway"
    settings = json.loads(plan.file("/tmp/farm-harness/home/.gemini/settings.json").content)
    assert settings["security"]["auth"]["selectedType"] == "gemini-api-key"
    assert settings["tools"]["sandbox"] is False
    argv = plan.commands[0]
    assert argv[argv.index("--approval-mode") + 1] == "yolo"
    assert plan.api == "google"


def test_opencode_custom_openai_compatible_provider() -> None:
    plan = plan_of("opencode", context_window=8192, max_output_tokens=1024)
    path = "/tmp/farm-harness/home/.config/opencode/opencode.json"
    config = json.loads(plan.file(path).content)
    provider = config["provider"]["farm"]
    assert provider["npm"] == "@ai-sdk/openai-compatible"
    assert served_route(provider["options"]["baseURL"] + "/chat/completions") == "openai_chat_completions"
    assert provider["models"]["policy-7b"]["limit"] == {"context": 8192, "output": 1024}
    assert config["model"] == "farm/policy-7b"
    assert config["permission"]["edit"] == "allow" and config["permission"]["bash"] == "allow"
    assert plan.env["OPENCODE_CONFIG"] == path
    assert plan.env["XDG_CONFIG_HOME"] == "/tmp/farm-harness/home/.config"
    assert plan.commands[0][:4] == ["opencode", "run", "--model", "farm/policy-7b"]


def test_shell_sets_every_provider_variable() -> None:
    plan = plan_of("shell", command="python agent.py --fast")
    env = plan.env
    assert served_route(env["OPENAI_BASE_URL"] + "/chat/completions") == "openai_chat_completions"
    assert served_route(env["OPENAI_BASE_URL"] + "/responses") == "openai_responses"
    assert served_route(env["ANTHROPIC_BASE_URL"] + "/v1/messages") == "anthropic_messages"
    google = env["GOOGLE_GEMINI_BASE_URL"] + "/v1beta/models/x:generateContent"
    assert served_route(google) == "google_generate"
    assert env["FARM_INSTRUCTION"] == inputs().instruction
    assert plan.file(env["FARM_INSTRUCTION_FILE"]).content == inputs().instruction
    assert plan.commands == [["bash", "-c", "python agent.py --fast"]]
    assert plan.api == "any"


def test_shell_needs_a_command() -> None:
    with pytest.raises(ValueError, match="command"):
        plan_of("shell")


def test_inputs_are_checked() -> None:
    with pytest.raises(ValueError, match="absolute"):
        inputs(home="relative/home")
    with pytest.raises(ValueError):
        inputs(instruction="")
    assert inputs().base_url == BASE and inputs().openai_base_url == BASE + "/v1"


@given(
    instruction=st.text(
        alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1
    )
)
def test_any_instruction_survives_the_shell_script(instruction: str) -> None:
    for name in ("pi", "codex", "claude_code", "qwen_code", "gemini_cli", "opencode"):
        plan = plan_of(name, instruction=instruction)
        assert shlex.split(plan.script()) == plan.commands[0]
        assert instruction in plan.commands[0]


@given(
    values=st.dictionaries(
        st.from_regex(r"[A-Za-z_][A-Za-z0-9_-]{0,12}", fullmatch=True).filter(
            lambda k: k != "model_providers"
        ),
        st.one_of(st.text(), st.booleans(), st.integers(-(2**40), 2**40)),
        max_size=6,
    )
)
@example(values={"weird key": 'quote " backslash \\ del \x7f tab \t nl \n é'})
def test_toml_rendering_round_trips(values: dict[str, object]) -> None:
    text = to_toml(values, {"model_providers.farm": values})
    parsed = tomllib.loads(text)
    assert {k: parsed[k] for k in values} == values
    assert parsed["model_providers"]["farm"] == values
