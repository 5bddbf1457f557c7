"""The `farm` command line: api, up, demo, and the subcommands of the reference LLM server,
the gateway and the run report."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import click

from farm.gateway.cli import gateway
from farm.llm.cli import llm
from farm.report.cli import report
from farm.settings import get_settings


@click.group()
@click.option("-v", "--verbose", is_flag=True, help="Log at INFO level.")
def main(verbose: bool) -> None:
    """rollout-farm: rollout-as-a-service for RL of multi-turn LLM agents."""
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING)


@main.command()
@click.option("--host", default=None, help="Default FARM_API_HOST or 127.0.0.1.")
@click.option("--port", type=int, default=None, help="Default FARM_API_PORT or 8000.")
def api(host: str | None, port: int | None) -> None:
    """Serve the REST facade and the model gateway (uvicorn)."""
    import uvicorn

    settings = get_settings()
    uvicorn.run(
        "farm.api.app:create_app",
        factory=True,
        host=host or settings.api_host,
        port=port or settings.api_port,
        log_level="warning",
    )


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
def up(
    port: int | None,
    llm_policy: str,
    run_concurrency: int,
    token_latency_ms: float,
    accuracy: float,
    log_dir: Path | None,
) -> None:
    """Start everything (Redis if none answers, API, one worker per queue, reference LLM) until Ctrl-C."""
    from farm.launcher import LocalFarm, default_workers, stop_signals_as_keyboard_interrupt

    settings = get_settings()
    farm = LocalFarm(
        redis_url=settings.redis_url,
        api_port=port or settings.api_port,
        workers=default_workers(run_concurrency),
        llm_policy=None if llm_policy == "none" else llm_policy,
        llm_args=_llm_args(token_latency_ms, accuracy, 0),
        log_dir=log_dir,
        quiet=log_dir is None,
        supervise=True,
    )
    with stop_signals_as_keyboard_interrupt():
        try:
            farm.start()
            click.echo(f"farm up: API {farm.api_url} (docs at /docs), Redis {farm.redis_url}")
            for url in farm.llm_urls:
                click.echo(f"  reference LLM ({llm_policy}) at {url}")
            click.echo("Ctrl-C stops everything.")
            while farm.alive():
                time.sleep(0.5)
            click.echo("a child process exited; stopping the farm", err=True)
        except KeyboardInterrupt:
            click.echo("\nstopping…")
        finally:
            farm.stop()


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
def demo(
    n_tasks: int,
    samples: int,
    out: Path | None,
    token_latency_ms: float,
    accuracy: float,
    run_concurrency: int,
) -> None:
    """Start a local farm, run a batch of math rollouts, print a summary, write trajectories."""
    from farm.demo import run_demo

    out = out or Path("farm-runs") / f"demo-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
    run_demo(n_tasks, samples, out, _llm_args(token_latency_ms, accuracy, 0), run_concurrency)


main.add_command(llm)
main.add_command(gateway)
main.add_command(report)

if __name__ == "__main__":
    main()
