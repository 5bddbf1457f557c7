"""`farm llm serve`: run the reference LLM server (the lead mounts the `llm` group on the farm CLI)."""

from __future__ import annotations

import click
from pydantic import ValidationError

from farm.llm.config import ServerConfig


def _faults(spec: str) -> dict[str, float]:
    """`abort=0.1,repetition=0.05` -> {"abort": 0.1, "repetition": 0.05}."""
    faults: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        reason, sep, chance = part.partition("=")
        try:
            faults[reason.strip()] = float(chance) if sep else float("nan")
        except ValueError:
            raise click.BadParameter(f"{part!r} is not reason=chance", param_hint="--finish-faults") from None
        if faults[reason.strip()] != faults[reason.strip()]:
            raise click.BadParameter(f"{part!r} is not reason=chance", param_hint="--finish-faults")
    return faults


@click.group("llm")
def llm() -> None:
    """The reference LLM server: a dev/test inference backend that behaves like vLLM or SGLang."""


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
              help="Tokenizer directory, pkg:<module> or mistral:<name> (default: farm-tiny).")  # fmt: skip
@click.option("--served-model-name", default=None)
@click.option("--emulate", type=click.Choice(["vllm", "sglang"]), default="vllm", show_default=True,
              help="Validate requests and shape errors and OpenAI replies as this server does.")  # fmt: skip
@click.option("--over-window", type=click.Choice(["refuse", "clamp"]), default="refuse", show_default=True,
              help="vLLM: refuse prompt + max_tokens over the window, or clamp as 0.32 does.")  # fmt: skip
@click.option("--finish-faults", "finish_faults", default="", callback=lambda _c, _p, v: _faults(v),
              help="Finish reasons forced by chance, e.g. abort=0.1,repetition=0.05.")  # fmt: skip
@click.option("--log-level", default="warning", show_default=True)
@click.option("--fd", type=int, default=None, hidden=True, help="Serve on this inherited bound socket.")
def serve(host: str, port: int, scripts: tuple[str, ...], no_handler_scripts: bool, log_level: str,
          fd: int | None, **settings: object) -> None:  # fmt: skip
    """Serve /v1/completions, /v1/chat/completions, /generate, /tokenize, /detokenize, /v1/models, /health."""
    from farm.llm.app import create_app
    from farm.web.serving import serve as serve_app

    try:
        config = ServerConfig.model_validate(
            {**settings, "scripts": list(scripts), "handler_scripts": not no_handler_scripts}
        )
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'flags'}: {e['msg']}" for e in exc.errors())
        raise click.UsageError(problems) from None
    app = create_app(config)
    click.echo(f"reference LLM ({config.policy}, {config.emulate}) on http://{host}:{port}/v1", err=True)
    serve_app(app, host=host, port=port, fd=fd, log_level=log_level)
