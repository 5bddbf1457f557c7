"""The worker's side of the gateway's session API (the contract's "Model gateway"): create, end, export.

An API restart (a deploy, `farm up` restarting its child) must not fail the harness jobs in flight: calls
that meet no gateway or a 5xx are retried with backoff for up to RETRY_WINDOW_S, as infrastructure."""

from __future__ import annotations

from typing import Any

import httpx

from farm.models.results import Trace
from farm.retry import within
from farm.settings import get_settings

RETRY_WINDOW_S = 30.0
"""How long a session call keeps retrying a gateway that does not answer (an API restart takes seconds)."""


class GatewayUnavailable(RuntimeError):
    pass


class _GatewayTrouble(Exception):
    """No answer or a 5xx: retried within RETRY_WINDOW_S."""


class GatewaySessions:
    def __init__(self, base: str | None = None, token: str | None = None, timeout_s: float = 60.0) -> None:
        settings = get_settings()
        self.base = (base or settings.gateway_base).rstrip("/")
        token = token if token is not None else settings.api_token
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(timeout=timeout_s, headers=headers)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> GatewaySessions:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _post(self, path: str, body: dict[str, Any] | None = None) -> Any:
        try:
            return within(_GatewayTrouble, RETRY_WINDOW_S)(self._post_once, f"{self.base}{path}", body)
        except _GatewayTrouble as exc:
            raise GatewayUnavailable(
                f"the model gateway at {self.base} did not answer POST {path}: {exc}"
            ) from None

    def _post_once(self, url: str, body: dict[str, Any] | None) -> Any:
        try:
            response = self.http.post(url, json=body or {})
        except httpx.TransportError as exc:
            raise _GatewayTrouble(f"{type(exc).__name__}: {exc}") from exc
        if response.status_code >= 500:
            raise _GatewayTrouble(f"HTTP {response.status_code}: {response.text[:300]}")
        if response.status_code >= 400:
            raise GatewayUnavailable(f"POST {url}: HTTP {response.status_code}: {response.text[:500]}")
        return response.json()

    def create(self, task_id: str | None, metadata: dict[str, Any]) -> tuple[str, str]:
        """(session id, base URL) of a new session."""
        answer = self._post("/sessions", {"task_id": task_id, "metadata": metadata})
        return answer["session_id"], answer["base_url"]

    def end(self, session_id: str) -> int:
        """Ends the session (idempotent); returns the number of recorded completions."""
        return int(self._post(f"/sessions/{session_id}/end")["completion_count"])

    def export(
        self, session_id: str, builder: str, config: dict[str, Any] | None = None
    ) -> tuple[list[Trace], list[dict[str, Any]]]:
        """(traces, failed model calls by class) of the session."""
        body: dict[str, Any] = {"builder": builder}
        if config:
            body["config"] = config
        answer = self._post(f"/sessions/{session_id}/export", body)
        traces = [Trace.model_validate(trace) for trace in answer["traces"]]
        return traces, list(answer.get("failed_calls") or [])
