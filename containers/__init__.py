"""Sandboxes for agent rollouts: one runtime interface (local bubblewrap, Apptainer, Docker), an execution
server inside each sandbox, and the tool backends it serves (pty bash, IPython kernel, file editor).

The names below are loaded on first use: the execution server imports `containers.server` inside the
sandbox with a bare interpreter and must not pay for pydantic at start-up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what type checkers see; at run time __getattr__ loads each on first use
    from containers.errors import ExecServerError as ExecServerError
    from containers.errors import SandboxError as SandboxError
    from containers.errors import SandboxLimitExceeded as SandboxLimitExceeded
    from containers.errors import SandboxStartError as SandboxStartError
    from containers.handle import SandboxHandle as SandboxHandle
    from containers.results import ExecResult as ExecResult
    from containers.results import ToolResult as ToolResult
    from containers.runtime import Runtime as Runtime
    from containers.runtime import attach as attach
    from containers.runtime import get_runtime as get_runtime
    from containers.sandbox import Sandbox as Sandbox
    from containers.spec import ReadOnlyBind as ReadOnlyBind
    from containers.spec import ResourceLimits as ResourceLimits
    from containers.spec import SandboxSpec as SandboxSpec

_EXPORTS = {
    "SandboxSpec": "containers.spec",
    "ResourceLimits": "containers.spec",
    "ReadOnlyBind": "containers.spec",
    "ExecResult": "containers.results",
    "ToolResult": "containers.results",
    "SandboxHandle": "containers.handle",
    "Sandbox": "containers.sandbox",
    "Runtime": "containers.runtime",
    "get_runtime": "containers.runtime",
    "attach": "containers.runtime",
    "SandboxError": "containers.errors",
    "SandboxStartError": "containers.errors",
    "SandboxLimitExceeded": "containers.errors",
    "ExecServerError": "containers.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'containers' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
