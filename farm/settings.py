"""Process configuration from FARM_* environment variables (SPEC "Processes and configuration")."""

from __future__ import annotations

import socket
from functools import lru_cache

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FARM_", extra="ignore")

    redis_url: str = DEFAULT_REDIS_URL
    api_host: str = "127.0.0.1"
    api_port: int = 8000
    api_token: str | None = None
    """When set, every facade endpoint but /healthz needs `Authorization: Bearer <token>`."""
    node: str = Field(default_factory=socket.gethostname)
    """Name of this node; a run worker also consumes `run.<node>` so sandboxes stay where they started."""
    result_ttl_s: int = 7 * 24 * 3600
    """How long job records and results stay readable in Redis."""
    default_timeout_s: float = 600.0
    visibility_timeout_s: int = 3 * 3600
    """Redis broker visibility timeout; must exceed the longest stage."""
    workdir: str = "/tmp/rollout-farm"
    """Per-node scratch space for job workspaces."""
    tokenizer: str | None = None
    """Tokenizer for token-in/token-out inference: a local HF directory; unset means the shipped one."""
    max_request_bytes: int = 8 * 1024 * 1024
    process_wait_s: float = 3600.0
    """How long POST /process with wait=true holds the connection before answering 202."""


@lru_cache
def get_settings() -> Settings:
    return Settings()
