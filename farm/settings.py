"""Process configuration from FARM_* environment variables (docs/CONTRACT.md "Settings")."""

from __future__ import annotations

import socket
from functools import lru_cache

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_SENTINEL_MASTER = "farm-redis"
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
"""FARM_REDIS_URL schemes naming a Redis Cluster (any of its nodes): `redis+cluster://host:port`."""


def is_cluster_url(url: str) -> bool:
    return url.strip().lower().split("://", 1)[0] in CLUSTER_SCHEMES


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FARM_", extra="ignore")

    redis_url: str = DEFAULT_REDIS_URL
    """redis://, rediss:// or unix:// URL, Sentinels in kombu's form
    `sentinel://[:password@]host:port[/db];sentinel://host2:port2;...`, or a Redis Cluster as
    `redis+cluster://host:port` (any node; then FARM_BROKER_URL names the broker); see
    farm/redis_clients.py."""
    broker_url: str | None = None
    """The Celery broker when it is not FARM_REDIS_URL: a plain redis:// URL. Required when
    FARM_REDIS_URL names a cluster (kombu has no cluster transport); stage messages are then pushed
    after the job script that records their stage, and the stall sweep re-sends one lost between."""
    redis_sentinel_master: str = DEFAULT_SENTINEL_MASTER
    """With a sentinel:// URL: the name the sentinels monitor the master under (ops/redis/sentinel.conf)."""
    redis_sentinel_password: str | None = None
    """With a sentinel:// URL: the sentinels' own password, when they have one (`requirepass`)."""
    redis_sentinel_retry_s: float = Field(30.0, gt=0)
    """With a sentinel:// URL: how long a command keeps retrying through a failover (a dead master is
    noticed after `down-after-milliseconds`, and writes wait for a replica to follow the new one)."""
    redis_max_connections: int = Field(100, ge=1)
    """Connections each Redis client of a process may hold (per pool: the API, the gateway, a worker).
    At the cap a command waits for a free connection (`redis_pool_timeout_s`) instead of failing;
    a `max_connections` option in the URL wins."""
    redis_pool_timeout_s: float = Field(20.0, gt=0)
    """How long a command waits for a free connection at the cap before it fails (a ConnectionError)."""
    api_host: str = "127.0.0.1"
    api_port: int = 8000
    api_token: str | None = None
    """When set, every facade endpoint but /healthz needs `Authorization: Bearer <token>`."""
    node: str = Field(default_factory=socket.gethostname)
    """Name of this node; a run worker also consumes `run.<node>` so sandboxes stay where they started."""
    result_ttl_s: int = 7 * 24 * 3600
    """How long job records and results stay readable in Redis."""
    default_timeout_s: float = 600.0
    workdir: str = "/tmp/rollout-farm"
    """Per-node scratch space for job workspaces."""
    tokenizer: str | None = None
    """Tokenizer for token-in/token-out inference: a local HF directory; unset means the shipped one."""
    tool_call_parser: str | None = None
    """The tool-call parser (vLLM's / SGLang's `--tool-call-parser` names, docs/FAMILIES.md) when neither
    the job nor its backend names one; unset means the tokenizer's guess."""

    @field_validator("tool_call_parser")
    @classmethod
    def _known_parser(cls, value: str | None) -> str | None:
        from farm.chat.families import resolve_parser

        return resolve_parser(value) if value else None

    max_request_bytes: int = 8 * 1024 * 1024
    stall_grace_s: float = 30.0
    """A job waiting this long with no running stage and no message in any queue is re-sent (a worker
    died holding its message before the stage began, or a reaper between reaping a lease and re-sending)."""
    no_backend_wait_s: float = Field(60.0, ge=0)
    """How long a job's model call waits for a healthy backend (none registered, as during a checkpoint
    swap, or every one unhealthy) before the job fails with NoBackendAvailable, naming each registered
    address and its error."""
    process_wait_s: float = 3600.0
    """How long POST /process with wait=true holds the connection before answering 202."""
    max_policy_lag: int | None = Field(None, ge=0)
    """Cancel a rollout before its next model call when the backend serves weights more than this many
    versions past its oldest turn (a job's `metadata.max_policy_lag` overrides; unset: always continue)."""
    ready_buffer: int = Field(64, ge=0)
    """READY buffer per node: sandboxes being prepared or prepared and waiting for their run stage. Init
    on a node waits while its buffer is full (backpressure), so prepared sandboxes cannot pile up
    while run is the bottleneck. 0 = unbounded. Applies to node-local handlers (those with a sandbox)."""
    warm_pool: int = Field(0, ge=0)
    """Warm sandbox pool of each init worker: at most this many sandboxes started ahead, per sandbox spec
    its jobs ask for, so init claims one in milliseconds instead of starting it (containers/warm_pool.py,
    tasks/warm.py). Sized from the init queue's depth and the node's free READY slots; each pooled
    sandbox holds memory (~8 MB) and its start costs CPU, so 0 (off) by default."""
    warm_pool_idle_s: float = Field(120.0, gt=0)
    """A pooled sandbox no job claimed for this long is stopped; a spec no job asked for as long is
    no longer pooled."""
    orphan_grace_s: float = 30.0
    """A job's sandbox younger than this is never stopped as an orphan (its starter may not have
    recorded it yet); see tasks/orphans.py."""
    backend_allow: str = "127.0.0.0/8,::1/128,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,fc00::/7"
    """Where `add_llm_server` may point: comma-separated CIDRs and host names (`.example.com` allows
    its subdomains). A host name not listed must resolve only to allowed addresses. Cloud metadata and
    link-local addresses are refused whatever this says (farm/api/url_allow.py)."""
    callback_allow: str = "0.0.0.0/0,::/0"
    """Where `callback_url` may point, in the same form; metadata and link-local addresses are refused."""
    harness_cli_dirs: str = ""
    """Host directories (':'-separated) holding harness CLIs installed on the host (e.g. an npm prefix),
    bound read-only at the same path into every harness sandbox: homes are hidden from sandboxes, so a
    CLI installed under ~ is reachable only this way (or from an image)."""
    host_file_roots: str = ""
    """Host directories (':'-separated) that `upload` steps may copy from into a sandbox, besides the
    project's own task data (the installed `handlers` package). A path must resolve, links followed,
    inside one of them, and be readable by the sandbox's host user (FARM_SANDBOX_UID when the farm runs as
    root), who also reads it: anything else is refused at submit with a 422 naming the step
    (handlers/host_files.py). A `swe` job's `repo_path` must resolve inside them too (bound, not copied;
    readability is not required: handlers/swe/instance.py)."""
    gateway_url: str | None = None
    """Where workers reach the model gateway (harness sessions), e.g. http://head:8000/gateway;
    unset means the API's own address (`api_host`:`api_port`)."""

    @property
    def gateway_base(self) -> str:
        if self.gateway_url:
            return self.gateway_url.rstrip("/")
        host = "127.0.0.1" if self.api_host in ("0.0.0.0", "::", "") else self.api_host
        return f"http://{host}:{self.api_port}/gateway"


@lru_cache
def get_settings() -> Settings:
    return Settings()


def redis_retry_options() -> dict[str, object]:
    """redis-py client options that ride out a short Redis outage (a restart, a failover) by retrying
    each command with backoff for about ten seconds instead of failing the stage or request."""
    from redis.backoff import ExponentialBackoff
    from redis.exceptions import ConnectionError, TimeoutError
    from redis.retry import Retry

    return {
        "retry": Retry(ExponentialBackoff(cap=2.0, base=0.1), retries=8),
        "retry_on_error": [ConnectionError, TimeoutError],
        "health_check_interval": 30,
    }


def async_redis_retry_options() -> dict[str, object]:
    """The same for redis.asyncio clients (the API and the gateway)."""
    from redis.asyncio.retry import Retry
    from redis.backoff import ExponentialBackoff
    from redis.exceptions import ConnectionError, TimeoutError

    return {
        "retry": Retry(ExponentialBackoff(cap=2.0, base=0.1), retries=8),
        "retry_on_error": [ConnectionError, TimeoutError],
        "health_check_interval": 30,
    }
