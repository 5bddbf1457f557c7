"""`farm llm serve`: run the reference LLM server (the lead mounts the `llm` group on the farm CLI)."""

from __future__ import annotations

import click

from farm.llm.config import ServerConfig


@click.group("llm")
def llm() -> None:
    """The reference LLM server: a dev/test inference backend speaking the vLLM subset the farm uses."""


@llm.command("serve")
@click.option("--policy", type=click.Choice(["scripted", "tiny"]), default="scripted", show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8001, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True, help="Model weights and the server RNG.")
@click.option("--accuracy", type=click.FloatRange(0, 1), default=0.5, show_default=True,
              help="scripted: chance that an episode follows its success path.")  # fmt: skip
@click.option("--token-latency-ms", type=float, default=0.0, show_default=True)
@click.option("--prefill-latency-ms", type=float, default=0.0, show_default=True)
@click.option("--latency-sigma", type=click.FloatRange(0, 4), default=0.0, show_default=True,
              help="Long tail: log-normal spread (mean 1) of each request's simulated latency.")  # fmt: skip
@click.option("--max-model-len", type=int, default=131072, show_default=True)
@click.option("--scripts", "scripts", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="Script JSONL file for the scripted policy (repeatable).")  # fmt: skip
@click.option("--no-handler-scripts", is_flag=True, help="Do not load handlers/*/scripts/*.jsonl.")
@click.option("--tokenizer", default=None,
              help="Local tokenizer directory or pkg:<module> (default: the shipped farm-tiny).")  # fmt: skip
@click.option("--served-model-name", default=None)
@click.option("--log-level", default="warning", show_default=True)
def serve(host: str, port: int, scripts: tuple[str, ...], no_handler_scripts: bool, log_level: str,
          **settings: object) -> None:  # fmt: skip
    """Serve /v1/completions, /v1/chat/completions, /generate, /tokenize, /detokenize, /v1/models, /health."""
    import uvicorn

    from farm.llm.app import create_app

    config = ServerConfig.model_validate(
        {**settings, "scripts": list(scripts), "handler_scripts": not no_handler_scripts}
    )
    app = create_app(config)
    click.echo(f"reference LLM server ({config.policy}) on http://{host}:{port}/v1", err=True)
    uvicorn.run(app, host=host, port=port, log_level=log_level)
