"""The model gateway: provider-shaped endpoints per session that record token-faithful completions."""

from farm.gateway.app import create_gateway_app, router
from farm.gateway.backends import BackendSource, StaticBackends
from farm.gateway.runtime import GatewayRuntime, gateway_lifespan
from farm.gateway.sessions import SessionInfo, SessionStore

__all__ = [
    "BackendSource",
    "GatewayRuntime",
    "SessionInfo",
    "SessionStore",
    "StaticBackends",
    "create_gateway_app",
    "gateway_lifespan",
    "router",
]
