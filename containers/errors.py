"""Errors raised at the sandbox boundary. A command that fails inside a sandbox is a result, not an error."""

from __future__ import annotations


class SandboxError(Exception):
    """Base class: the sandbox machinery (not the command run in it) failed."""


class SandboxStartError(SandboxError):
    """The runtime could not start a sandbox (missing binary, bad image, server did not come up)."""


class ExecServerError(SandboxError):
    """The execution server could not be reached or answered with an error."""


class SandboxLimitExceeded(ExecServerError):
    """The sandbox was ended for exceeding a resource limit (its workspace disk cap): the job ends with this
    resource failure, it is no observation for the policy."""


class RuntimeUnavailable(SandboxError):
    """The runtime's binary or engine is not present on this machine."""
