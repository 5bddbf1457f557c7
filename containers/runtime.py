"""The runtime interface and the registry of runtimes by name."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from containers.handle import SandboxHandle

if TYPE_CHECKING:
    from containers.sandbox import Sandbox
    from containers.spec import SandboxSpec

RUNTIMES = {
    "local": "containers.local:LocalRuntime",
    "apptainer": "containers.apptainer:ApptainerRuntime",
    "docker": "containers.docker:DockerRuntime",
}


@runtime_checkable
class Runtime(Protocol):
    name: str

    def start(self, spec: SandboxSpec) -> Sandbox:
        """Start a sandbox and return once its execution server answers."""
        ...

    def attach(self, handle: SandboxHandle) -> Sandbox:
        """Re-open a sandbox started elsewhere (same node) from its handle."""
        ...

    def teardown(self, handle: SandboxHandle) -> None:
        """Kill every process of the sandbox and remove its directories; safe to repeat."""
        ...


def get_runtime(name: str, **options: Any) -> Runtime:
    """A runtime by registry name: "local" (bubblewrap), "apptainer" or "docker"."""
    target = RUNTIMES.get(name)
    if target is None:
        raise KeyError(f"unknown runtime {name!r}; known: {', '.join(sorted(RUNTIMES))}")
    module, _, attr = target.partition(":")
    runtime: Runtime = getattr(importlib.import_module(module), attr)(**options)
    return runtime


def attach(handle: SandboxHandle | dict[str, Any], **options: Any) -> Sandbox:
    """Re-open a sandbox from `Sandbox.handle()` in any process on the node that started it."""
    parsed = handle if isinstance(handle, SandboxHandle) else SandboxHandle.model_validate(handle)
    return get_runtime(parsed.runtime, **options).attach(parsed)
