"""The published harness CLIs the farm runs unchanged, pinned, and their install from the npm registry
into a cache directory that sandboxes can see ($FARM_HARNESS_CLI_CACHE, else
~/.cache/rollout-farm/harness-cli; never /tmp, which sandboxes do not see)."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class HarnessCli:
    package: str
    version: str
    binary: str


HARNESS_CLIS: dict[str, HarnessCli] = {
    "pi": HarnessCli("@mariozechner/pi-coding-agent", "0.73.1", "pi"),
    "claude_code": HarnessCli("@anthropic-ai/claude-code", "2.1.331", "claude"),
    "codex": HarnessCli("@openai/codex", "0.169.0", "codex"),
    "qwen_code": HarnessCli("@qwen-code/qwen-code", "0.24.4", "qwen"),
    "gemini_cli": HarnessCli("@google/gemini-cli", "0.61.0", "gemini"),
    "opencode": HarnessCli("opencode-ai", "1.18.33", "opencode"),
}


class CliUnavailable(RuntimeError):
    """The CLI cannot be installed here (no node/npm, registry unreachable); the message says why."""


def cli_cache() -> Path:
    configured = os.environ.get("FARM_HARNESS_CLI_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "rollout-farm" / "harness-cli"


def install_prefix(cli: HarnessCli) -> Path:
    return cli_cache() / f"{cli.package.rsplit('/', 1)[-1]}-{cli.version}"


def install_cli(cli: HarnessCli, timeout_s: float = 600) -> Path:
    """The CLI's executable, installed once (atomically: into a partial dir, then renamed)."""
    target = install_prefix(cli)
    binary = target / "node_modules" / ".bin" / cli.binary
    if binary.exists():
        return binary
    if shutil.which("node") is None or shutil.which("npm") is None:
        raise CliUnavailable("node and npm are needed to install a harness CLI from the npm registry")
    if str(cli_cache().resolve()).startswith("/tmp/"):
        raise CliUnavailable("sandboxes cannot see /tmp: set FARM_HARNESS_CLI_CACHE elsewhere")
    ping = subprocess.run(["npm", "ping"], capture_output=True, text=True, timeout=60)
    if ping.returncode != 0:
        raise CliUnavailable(
            f"the npm registry is unreachable: {(ping.stderr or ping.stdout).strip()[-300:]}"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.parent / f".partial-{target.name}-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    argv = ["npm", "install", "--prefix", str(partial), "--no-audit", "--no-fund", "--loglevel=error"]
    done = subprocess.run(
        [*argv, f"{cli.package}@{cli.version}"], capture_output=True, text=True, timeout=timeout_s
    )
    if done.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        raise RuntimeError(f"npm install {cli.package}@{cli.version} failed:\n{done.stderr[-2000:]}")
    try:
        partial.rename(target)
    except OSError:  # installed meanwhile by someone else
        shutil.rmtree(partial, ignore_errors=True)
    return binary
