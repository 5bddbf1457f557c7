"""The `farm` command line: api, up, demo, and the subcommands of the reference LLM server,
the gateway and the run report."""

from __future__ import annotations

import importlib
import logging
import signal
import time
from pathlib import Path
from typing import Any

import click

from farm.identity import mask_url
from farm.logs import stamp
from farm.settings import Settings, get_settings

GROUPS = {"llm": "farm.llm.cli", "gateway": "farm.gateway.cli", "report": "farm.report.cli"}
"""Subcommand groups imported when named: `farm api` (how the launcher starts the API) then skips the
reference LLM's and the report's imports, about a second on a busy 2-core machine."""


class FarmGroup(click.Group):
    """Every error of a subcommand is one line `farm <command>: <what went wrong>` and exit code 1;
    `--debug` shows the traceback instead."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *GROUPS})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in GROUPS and name not in self.commands:
            self.add_command(getattr(importlib.import_module(GROUPS[name]), name))
        return super().get_command(ctx, name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort, SystemExit, KeyboardInterrupt):
            raise
        except Exception as exc:
            if ctx.params.get("debug"):
                raise
            from farm.launcher import FarmStartError

            what = str(exc) if isinstance(exc, FarmStartError) else f"{type(exc).__name__}: {exc}"
            what = " ".join(what.split())  # one line
            hint = "" if isinstance(exc, FarmStartError) else " (--debug shows the traceback)"
            click.echo(f"farm {ctx.invoked_subcommand}: {what}{hint}", err=True)
            ctx.exit(1)


@click.group(cls=FarmGroup)
@click.option("-v", "--verbose", is_flag=True, help="Log at INFO level.")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
def main(verbose: bool, debug: bool) -> None:
    """rollout-farm: rollout-as-a-service for RL of multi-turn LLM agents."""
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def given_redis_url(settings: Settings) -> str | None:
    """FARM_REDIS_URL when the operator set it; None means "start a private Redis" (never whatever
    happens to answer on the default port)."""
    return settings.redis_url if "redis_url" in settings.model_fields_set else None


def given_api_port(settings: Settings) -> int | None:
    return settings.api_port if "api_port" in settings.model_fields_set else None


@main.command()
@click.option("--host", default=None, help="Default FARM_API_HOST or 127.0.0.1.")
@click.option("--port", type=int, default=None, help="Default FARM_API_PORT or 8000.")
@click.option("--fd", type=int, default=None, hidden=True, help="Serve on this inherited bound socket.")
def api(host: str | None, port: int | None, fd: int | None) -> None:
    """Serve the REST facade and the model gateway (uvicorn)."""
    from farm.embedded_redis import port_in_use
    from farm.launcher import FarmStartError
    from farm.web.listen_guard import check_listen

    settings = get_settings()
    host, port = host or settings.api_host, port or settings.api_port
    check_listen(host, settings.api_token)
    if fd is None and port_in_use(port, "127.0.0.1" if host in ("0.0.0.0", "::", "") else host):
        raise FarmStartError(f"port {port} in use")  # before uvicorn and the app are imported (seconds)
    from farm.redis_clients import redis_answers
    from farm.web.serving import API_OPTIONS, serve

    if not redis_answers(settings.redis_url, settings=settings):
        raise FarmStartError(f"Redis at {mask_url(settings.redis_url)} does not answer (FARM_REDIS_URL)")
    click.echo(
        f"{stamp()} farm api: http://{host}:{port} (docs at /docs), Redis {mask_url(settings.redis_url)}"
    )
    serve("farm.api.app:create_app", factory=True, host=host, port=port, fd=fd, **API_OPTIONS)


def _llm_args(token_latency_ms: float, accuracy: float, seed: int) -> list[str]:
    return ["--token-latency-ms", str(token_latency_ms), "--accuracy", str(accuracy), "--seed", str(seed)]


@main.command()
@click.option("--port", type=int, default=None, help="API port (default FARM_API_PORT or 8000).")
@click.option(
    "--llm-policy",
    type=click.Choice(["scripted", "tiny", "none"]),
    default="scripted",
    help="Reference LLM server to start and register; `none` to register your own backends.",
)
@click.option("--run-concurrency", type=int, default=16, show_default=True)
@click.option("--token-latency-ms", type=float, default=1.0, show_default=True)
@click.option("--accuracy", type=float, default=0.5, show_default=True)
@click.option("--log-dir", type=click.Path(path_type=Path), default=None)
@click.option(
    "--redis-port", type=int, default=0, help="Port of the private redis-server (default: a free one)."
)
@click.option(
    "--llm-port", type=int, default=0, help="Port of the reference LLM server (default: a free one)."
)
def up(
    port: int | None,
    llm_policy: str,
    run_concurrency: int,
    token_latency_ms: float,
    accuracy: float,
    log_dir: Path | None,
    redis_port: int,
    llm_port: int,
) -> None:
    """Start everything (a private Redis unless FARM_REDIS_URL is set, the API, one worker per queue,
    the reference LLM) and keep it running: a child that dies is restarted with backoff. Ctrl-C drains
    the workers (running stages finish or go back to the queue), then stops everything."""
    from farm.launcher import LocalFarm, default_workers, stop_signals_as_keyboard_interrupt

    settings = get_settings()
    farm = LocalFarm(
        redis_url=given_redis_url(settings),
        api_port=port or settings.api_port,
        redis_port=redis_port,
        llm_port=llm_port,
        workers=default_workers(run_concurrency),
        llm_policy=None if llm_policy == "none" else llm_policy,
        llm_args=_llm_args(token_latency_ms, accuracy, 0),
        log_dir=log_dir,
        quiet=log_dir is None,
        supervise=True,
        check_port=True,
    )
    with stop_signals_as_keyboard_interrupt():
        try:
            farm.start()
            print_farm_table(farm, private_redis=given_redis_url(settings) is None)
            click.echo("Ctrl-C drains and stops everything.")
            while True:  # the supervisor thread restarts children; only a signal ends `farm up`
                time.sleep(1.0)
        except KeyboardInterrupt:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the drain short
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            click.echo("\ndraining workers, then stopping…")
        finally:
            farm.stop(grace_s=30.0)


def print_farm_table(farm: Any, private_redis: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    redis_note = (
        "private redis-server (set FARM_REDIS_URL to use another)" if private_redis else "FARM_REDIS_URL"
    )
    table = Table(title=f"farm {farm.id} up: API {farm.api_url} (docs at /docs)")
    for column in ("process", "pid", "serves"):
        table.add_column(column)
    for name, pid, what in farm.table():
        table.add_row(name, str(pid), mask_url(what) if name == "redis" else what)
    if not private_redis:
        table.add_row("redis", "-", f"{mask_url(farm.redis_url)} ({redis_note})")
    Console().print(table)
    click.echo(f"Redis: {mask_url(farm.redis_url)} ({redis_note}); scratch dir {farm.scratch_dir}")


@main.command()
@click.option("--tasks", "n_tasks", type=int, default=32, show_default=True, help="Math problems.")
@click.option("--samples", type=int, default=4, show_default=True, help="Samples per problem (GRPO group).")
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="Trajectories JSONL (default farm-runs/demo-<time>.jsonl).",
)
@click.option("--token-latency-ms", type=float, default=1.0, show_default=True)
@click.option("--accuracy", type=float, default=0.5, show_default=True)
@click.option("--run-concurrency", type=int, default=16, show_default=True)
@click.option(
    "--harness",
    default=None,
    help="Run this harness CLI (pi, claude_code, codex, qwen_code, gemini_cli, opencode) on a calc.py "
    "bug-fix task instead of math; the CLI is installed from npm into the harness CLI cache.",
)
@click.option("--harness-command", default=None, help="The harness program to run (default: the cached CLI).")
@click.option("--port", type=int, default=None, help="API port (default FARM_API_PORT, else a free one).")
@click.option(
    "--redis-port", type=int, default=0, help="Port of the private redis-server (default: a free one)."
)
@click.option(
    "--llm-port", type=int, default=0, help="Port of the reference LLM server (default: a free one)."
)
def demo(
    n_tasks: int,
    samples: int,
    out: Path | None,
    token_latency_ms: float,
    accuracy: float,
    run_concurrency: int,
    harness: str | None,
    harness_command: str | None,
    port: int | None,
    redis_port: int,
    llm_port: int,
) -> None:
    """Start a local farm, run a batch of math (or harness) rollouts, print a summary, write trajectories."""
    from farm.demo import run_demo

    harness_run: tuple[str, str] | None = None
    if harness is not None:
        from handlers.harness.clis import HARNESS_CLIS, CliUnavailable, install_cli

        if harness_command is None:
            if harness not in HARNESS_CLIS:
                raise click.BadParameter(f"one of {', '.join(sorted(HARNESS_CLIS))}", param_hint="--harness")
            try:
                click.echo(
                    f"installing {HARNESS_CLIS[harness].package} into the harness CLI cache if needed…"
                )
                harness_command = str(install_cli(HARNESS_CLIS[harness]))
            except (CliUnavailable, RuntimeError) as exc:
                raise click.ClickException(str(exc)) from exc
        harness_run = (harness, harness_command)

    out = out or Path("farm-runs") / f"demo-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
    settings = get_settings()
    code = run_demo(
        n_tasks,
        samples,
        out,
        _llm_args(token_latency_ms, accuracy, 0),
        run_concurrency,
        redis_url=given_redis_url(settings),
        api_port=port or given_api_port(settings),
        harness=harness_run,
        redis_port=redis_port,
        llm_port=llm_port,
    )
    if code:
        raise click.exceptions.Exit(code)


if __name__ == "__main__":
    main()
