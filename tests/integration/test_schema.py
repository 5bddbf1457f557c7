"""Schemathesis against the farm's own OpenAPI: generated requests to every endpoint of a running farm
(real API process, Redis, a Celery worker, the scripted reference LLM) must never get a 5xx and every
answer must match the response schema the API declares.

The farm here is this module's own `LocalFarm` on its own Redis, so endpoints with farm-wide side
effects (`/stop`, `/clear_llm_server`, `/add_llm_server` with junk, `/cancel` by policy version) can be
fuzzed without disturbing the session farm; after such a call the farm is put back (accepting, one
healthy backend). Defects this run found are kept below as tests, with the request that showed them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import content_type_conformance, not_a_server_error, response_schema_conformance

from farm.api.app import create_app
from farm.embedded_redis import EmbeddedRedis
from farm.launcher import LocalFarm, WorkerSpec

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # schemathesis fuzzing: the CI slow step

MAX_EXAMPLES = 12
CHECKS = [not_a_server_error, response_schema_conformance, content_type_conformance]

# The schema the running farm serves is the app's own; test_served_schema_is_the_app_schema checks that.
schema = schemathesis.openapi.from_dict(create_app().openapi())

# Calls after which the farm is put back into its normal state before the next case.
DISTURBING = {"/stop", "/clear_llm_server", "/add_llm_server", "/cancel"}


class SchemaFarm:
    def __init__(self, local: LocalFarm) -> None:
        self.local = local
        self.http = httpx.Client(base_url=local.api_url, timeout=30)
        self.session_id = ""

    def restore(self) -> None:
        """Accepting work, exactly the reference LLM as backend, and a live gateway session."""
        self.http.post("/start").raise_for_status()
        backends = self.http.get("/llm_servers").raise_for_status().json()
        if sorted(b["address"] for b in backends) != sorted(self.local.llm_urls):
            self.http.post("/clear_llm_server").raise_for_status()
            for url in self.local.llm_urls:
                self.http.post("/add_llm_server", json={"address": url}).raise_for_status()
        if not self.session_id:
            created = self.http.post("/gateway/sessions", json={"metadata": {"suite": "schema"}})
            self.session_id = created.raise_for_status().json()["session_id"]


@pytest.fixture(scope="module")
def schema_farm() -> Iterator[SchemaFarm]:
    redis_server = EmbeddedRedis().start()
    local = LocalFarm(
        redis_url=redis_server.url,
        workers=[WorkerSpec("init,run,eval", concurrency=4)],
        llm_policy="scripted",
    )
    try:
        local.start(timeout_s=90)
        farm = SchemaFarm(local)
        farm.restore()
        yield farm
        farm.http.close()
    finally:
        local.stop()
        redis_server.stop()


def test_served_schema_is_the_app_schema(schema_farm: SchemaFarm) -> None:
    served = schema_farm.http.get("/openapi.json").raise_for_status().json()
    assert served == create_app().openapi()


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_no_server_errors_or_schema_violations(case: schemathesis.Case, schema_farm: SchemaFarm) -> None:
    if "session_id" in (case.path_parameters or {}):
        # A real session, so the gateway's handlers run instead of stopping at "unknown session".
        case.path_parameters = {**case.path_parameters, "session_id": schema_farm.session_id}
    if case.operation.path == "/process" and isinstance(case.body, dict):
        # Never hold the connection for a generated job's whole run.
        case.body = {**case.body, "wait": False}
    try:
        case.call_and_validate(base_url=schema_farm.local.api_url, checks=CHECKS)
    finally:
        if case.operation.path in DISTURBING:
            schema_farm.restore()


# --- Found by the run above and fixed; kept so they stay fixed -------------------------------------


class KnownDefect(AssertionError):
    pass


def defect_unless(condition: bool, message: str) -> None:
    if not condition:
        raise KnownDefect(message)


def _documented(path: str, method: str) -> set[str]:
    return set(create_app().openapi()["paths"][path][method]["responses"])


@pytest.mark.parametrize(
    "body",
    [{"builder": "no-such-builder"}, {"builder": "prefix_merging", "config": {"bogus": 1}}],
    ids=["unknown-builder", "unknown-config-key"],
)
def test_export_rejections_match_the_declared_error_schema(
    schema_farm: SchemaFarm, body: dict[str, Any]
) -> None:
    response = schema_farm.http.post(f"/gateway/sessions/{schema_farm.session_id}/export", json=body)
    assert response.status_code == 422
    defect_unless(isinstance(response.json()["detail"], list), f"detail is {response.json()['detail']!r}")


UNDOCUMENTED_STATUS: list[tuple[str, str, str, dict[str, Any] | bytes | None, int]] = [
    ("get", "/jobs/{job_id}", "/jobs/no-such-job", None, 404),
    ("post", "/cancel", "/cancel", {"job_id": "no-such-job"}, 404),
    ("get", "/rollout/task/{task_id}", "/rollout/task/no-such-task", None, 404),
    ("get", "/gateway/sessions/{session_id}", "/gateway/sessions/no-such-session", None, 404),
    ("post", "/gateway/sessions/{session_id}/end", "/gateway/sessions/no-such-session/end", None, 404),
    # A body that is not UTF-8: a 422 like any other undecodable body (farm/api/strict_json.py).
    ("post", "/process", "/process", b"\xff\xfe\x00", 422),
    ("post", "/rollout/task/submit", "/rollout/task/submit", b"\xff\xfe\x00", 422),
]


@pytest.mark.parametrize(("method", "template", "path", "body", "status"), UNDOCUMENTED_STATUS)
def test_answered_status_codes_are_documented(
    schema_farm: SchemaFarm,
    method: str,
    template: str,
    path: str,
    body: dict[str, Any] | bytes | None,
    status: int,
) -> None:
    if isinstance(body, bytes):
        response = schema_farm.http.request(
            method, path, content=body, headers={"content-type": "application/json"}
        )
    else:
        response = schema_farm.http.request(method, path, json=body)
    assert response.status_code == status, response.text
    defect_unless(str(status) in _documented(template, method), f"{status} is not documented")


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/process", {"instance": {"handler": "noop"}, "wait": False}),
        ("/rollout/task/submit", {"task_id": "schema-stopped", "instance": {"handler": "noop"}}),
    ],
)
def test_stopped_farm_answer_is_documented(schema_farm: SchemaFarm, path: str, body: dict[str, Any]) -> None:
    try:
        schema_farm.http.post("/stop").raise_for_status()
        response = schema_farm.http.post(path, json=body)
    finally:
        schema_farm.restore()
    assert response.status_code == 503, response.text
    defect_unless("503" in _documented(path, "post"), "503 is not documented")


def test_cancel_rejects_a_boolean_policy_version(schema_farm: SchemaFarm) -> None:
    response = schema_farm.http.post("/cancel", json={"older_than_policy_version": False})
    defect_unless(response.status_code == 422, f"answered {response.status_code}: {response.text}")
