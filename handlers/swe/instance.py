"""SWE-bench / SWE-Gym instances as the `swe` handler takes them.

`SweTask` is what scoring needs (repository source, base commit, test patch, test lists, test command);
`SweInstance` adds what the agent needs (the issue text, loop limits). Test lists are accepted as lists
or as the JSON-encoded strings SWE-bench ships.

Where the repository comes from (exactly one):
- `repo_path`: absolute path of a git repository (working tree or bare) on the worker nodes. It is
  bound read-only into the sandbox and cloned with `--shared`, so nothing is copied and no network
  is needed. Every node that runs init or eval for the job must see the path (a shared filesystem,
  or the same machine). The path must resolve, links and `..` followed, inside a directory the
  operator allows host files from (FARM_HOST_FILE_ROOTS, or the project's own task data;
  handlers/host_files.py): checked here (at submit: a 422 naming `repo_path`; a path the API's host
  does not have is resolved as far as it exists) and again, strictly, on the worker before the bind
  (repository.py `check_source`). Unlike an `upload` step, the sandbox's user need not be able to read
  it: the farm binds root-private sources through an idmapped mount (containers/identity.py), so a
  repository in a root-only directory INSIDE an allowed root is readable in the sandbox without
  changing the host. That is why the roots are the whole defence here: a repository outside them
  would be just as readable.
- `repo_url`: any URL `git clone` takes (e.g. `https://github.com/{repo}.git`). Cloned inside the
  sandbox, so the job's runtime needs `network: true`.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from farm.agent.loop import AgentLimits
from farm.handler.protocol import HandlerInstance
from handlers.host_files import resolve_inside_roots

_COMMIT = re.compile(r"^[0-9a-fA-F]{4,64}$")
_URL = re.compile(r"^(?:[a-z][a-z0-9+.-]*://\S+|[\w.-]+@[\w.-]+:\S+)$")


def _test_list(value: Any, field: str) -> Any:
    """SWE-bench ships FAIL_TO_PASS / PASS_TO_PASS as JSON-encoded strings; accept both forms."""
    if not isinstance(value, str):
        return value
    try:
        decoded = json.loads(value)
    except ValueError:
        raise ValueError(f"{field} must be a list of test ids or a JSON-encoded list") from None
    if not isinstance(decoded, list):
        raise ValueError(f"{field} must be a list of test ids or a JSON-encoded list")
    return decoded


class SweTask(BaseModel):
    """The part of an instance that scoring reads (also what `evaluate_patch` takes)."""

    model_config = ConfigDict(extra="allow")

    instance_id: str = Field(min_length=1)
    repo: str = Field(min_length=1)
    """`owner/name`, as in SWE-bench; used in the prompt and logs."""
    base_commit: str
    test_patch: str = ""
    """Diff adding/changing the tests; applied after the model's patch, on a fresh checkout."""
    FAIL_TO_PASS: list[str] = Field(min_length=1)
    PASS_TO_PASS: list[str] = Field(default_factory=list)
    repo_url: str | None = None
    repo_path: str | None = Field(None, validate_default=True)
    test_command: str = Field("python -m pytest", min_length=1)
    """A pytest invocation; `-rA`, `--rootdir` and the test files of both lists are appended."""
    eval_timeout_s: float = Field(300.0, gt=0, le=7200)
    evaluator: Literal["farm", "swebench"] = "farm"
    """`farm`: a fresh sandbox of the job's runtime; `swebench`: the swebench package's Docker harness
    (needs `swebench` and a Docker engine on the eval worker)."""

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS", mode="before")
    @classmethod
    def _json_lists(cls, value: Any, info: ValidationInfo) -> Any:
        return _test_list(value, info.field_name or "test list")

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS")
    @classmethod
    def _non_empty_ids(cls, value: list[str]) -> list[str]:
        if any(not test_id.strip() for test_id in value):
            raise ValueError("test ids must not be empty")
        return value

    @field_validator("base_commit")
    @classmethod
    def _commit(cls, value: str) -> str:
        if not _COMMIT.match(value):
            raise ValueError("base_commit must be a commit hash (4 to 64 hex digits)")
        return value.lower()

    @field_validator("repo_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not _URL.match(value):
            raise ValueError("repo_url must be a URL git can clone (scheme://... or user@host:path)")
        return value

    @field_validator("repo_path")
    @classmethod
    def _source(cls, value: str | None, info: ValidationInfo) -> str | None:
        url = info.data.get("repo_url")
        if value is None and url is None:
            raise ValueError(
                "give repo_path (a git repository readable by the workers) or repo_url "
                "(cloned inside the sandbox; needs runtime.network)"
            )
        if value is not None and url is not None:
            raise ValueError("give either repo_path or repo_url, not both")
        if value is not None and not value.startswith("/"):
            raise ValueError("repo_path must be an absolute path")
        if value is not None:
            resolve_inside_roots(value, strict=False)  # HostPathRefused is a ValueError: names the field
        return value

    @property
    def test_ids(self) -> list[str]:
        return list(dict.fromkeys([*self.FAIL_TO_PASS, *self.PASS_TO_PASS]))


class SweInstance(HandlerInstance, SweTask, AgentLimits):
    """A `swe` job's instance: the task plus the issue text and the agent's limits."""

    # A SWE-bench row carries columns the farm does not read (hints_text, created_at, version, ...):
    # accepted as they are, except a near miss of a declared field (HandlerInstance).
    model_config = ConfigDict(extra="allow")

    problem_statement: str = Field(min_length=1)
    max_turns: int = Field(30, ge=1, le=500)
    max_context_tokens: int = Field(32768, ge=256)
    tool_timeout_s: float = Field(60.0, gt=0, le=1800)
