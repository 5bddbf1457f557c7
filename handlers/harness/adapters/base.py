"""What every harness adapter takes and returns: the session's coordinates in, a plan (config files, env,
commands) out. Adapters are pure: they never touch a sandbox, so their output is unit-testable."""

from __future__ import annotations

import json
import posixpath
import shlex
from abc import ABC, abstractmethod
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

GatewayApi = Literal["openai_chat", "openai_responses", "anthropic", "google", "any"]
"""Which of the gateway's provider APIs a harness calls (`any`: up to the user's command)."""


class HarnessInputs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    base_url: str = Field(min_length=1)
    """The session's base URL (`.../gateway/sessions/{id}`), without a trailing slash."""
    model: str = Field(min_length=1)
    instruction: str = Field(min_length=1)
    workspace: str = "/workspace"
    home: str = "/tmp/farm-harness/home"
    """HOME of the harness inside the sandbox: its config files go here, never into the workspace."""
    command: str | None = None
    """The user's command. For `shell` the whole command; for a named harness the program to launch
    instead of its default executable (e.g. `node /opt/pi/dist/cli.js`); flags are still added."""
    api_key: str = "farm-gateway"
    """What the harness sends as its API key: the gateway ignores it (the session id is the secret)."""
    context_window: int | None = Field(None, gt=0)
    max_output_tokens: int | None = Field(None, gt=0)

    @field_validator("base_url")
    @classmethod
    def _strip_slash(cls, value: str) -> str:
        return value.rstrip("/")

    @field_validator("workspace", "home")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("must be an absolute path inside the sandbox")
        return posixpath.normpath(value)

    @property
    def openai_base_url(self) -> str:
        """OpenAI-style base URL: clients append `/chat/completions` or `/responses`."""
        return f"{self.base_url}/v1"

    def in_home(self, *parts: str) -> str:
        return posixpath.join(self.home, *parts)


class PlannedFile(BaseModel):
    model_config = ConfigDict(frozen=True)

    path: str
    """Absolute path inside the sandbox."""
    content: str
    mode: int = 0o600


class HarnessPlan(BaseModel):
    model_config = ConfigDict(frozen=True)

    harness: str
    api: GatewayApi
    files: list[PlannedFile] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    commands: list[list[str]] = Field(min_length=1)
    """argv lists run one after the other (stopping at the first failure), in the workspace."""

    def script(self) -> str:
        """The commands as one bash script."""
        return " && ".join(shlex.join(argv) for argv in self.commands)

    def file(self, path: str) -> PlannedFile:
        return next(f for f in self.files if f.path == path)


class HarnessAdapter(ABC):
    name: ClassVar[str]
    executable: ClassVar[str]
    """The program launched when the user gives no command."""
    default_model: ClassVar[str] = "farm-policy"
    """Model name the harness sends when none is given (the gateway serves the backend's model anyway)."""

    @abstractmethod
    def plan(self, inputs: HarnessInputs) -> HarnessPlan: ...

    def make_plan(
        self, api: GatewayApi, files: list[PlannedFile], env: dict[str, str], argv: list[str]
    ) -> HarnessPlan:
        """The plan every harness makes: its files and env, then one command."""
        return HarnessPlan(harness=self.name, api=api, files=files, env=env, commands=[argv])

    def program(self, inputs: HarnessInputs) -> list[str]:
        return shlex.split(inputs.command) if inputs.command else [self.executable]

    @staticmethod
    def base_env(inputs: HarnessInputs) -> dict[str, str]:
        """Variables every harness gets: its own HOME and the farm's coordinates."""
        return {
            "HOME": inputs.home,
            "FARM_GATEWAY_BASE_URL": inputs.base_url,
            "FARM_MODEL": inputs.model,
            "NO_COLOR": "1",
            "TERM": "dumb",
        }


def to_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


def toml_value(value: Any) -> str:
    """A TOML literal for str / bool / int / float (JSON string escapes are valid TOML basic strings)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):  # TOML also wants DEL escaped, which JSON leaves alone
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    raise TypeError(f"no TOML rendering for {type(value).__name__}")


def toml_key(key: str) -> str:
    bare = key.replace("_", "").replace("-", "").isalnum() and key.isascii()
    return key if bare else json.dumps(key)


def to_toml(top: dict[str, Any], tables: dict[str, dict[str, Any]]) -> str:
    """Top-level keys first, then `[dotted.table]` sections (only flat values inside)."""
    lines = [f"{toml_key(k)} = {toml_value(v)}" for k, v in top.items() if v is not None]
    for name, values in tables.items():
        lines += ["", f"[{'.'.join(toml_key(part) for part in name.split('.'))}]"]
        lines += [f"{toml_key(k)} = {toml_value(v)}" for k, v in values.items() if v is not None]
    return "\n".join(lines) + "\n"
