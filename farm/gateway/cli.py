"""`farm gateway`: serve the model gateway on its own."""

from __future__ import annotations

import click


@click.command("gateway")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8100, show_default=True, type=int)
@click.option("--redis-url", default=None, help="Defaults to FARM_REDIS_URL.")
@click.option(
    "--backend",
    "backends",
    multiple=True,
    help="OpenAI-compatible base URL (http://host:port/v1); repeat for several. Default: the farm's pool.",
)
@click.option(
    "--upstream-timeout", default=600.0, show_default=True, type=float, help="Seconds per backend call."
)
@click.option("--log-level", default="warning", show_default=True)
def gateway(
    host: str,
    port: int,
    redis_url: str | None,
    backends: tuple[str, ...],
    upstream_timeout: float,
    log_level: str,
) -> None:
    """Provider-shaped model gateway (OpenAI, Anthropic, Google) recording token-faithful completions."""
    import uvicorn  # the server's imports wait for the command that serves (farm --help stays quick)

    from farm.gateway.app import create_gateway_app
    from farm.gateway.backends import StaticBackends
    from farm.settings import get_settings
    from farm.web.listen_guard import check_listen

    check_listen(host, get_settings().api_token)
    app = create_gateway_app(
        redis_url=redis_url,
        backends=StaticBackends(list(backends)) if backends else None,
        upstream_timeout_s=upstream_timeout,
    )
    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False)


if __name__ == "__main__":
    gateway()
