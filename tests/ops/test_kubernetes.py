"""ops/kubernetes/ checked offline: every core object against the Kubernetes OpenAPI schemas that the
kubernetes-validate package ships (strict: an unknown field is an error), KEDA's ScaledObjects against the
fields KEDA documents for them and for its redis list scaler, and the manifests against the farm itself:
each worker Deployment consumes the queue its ScaledObject measures, the lists measured are exactly the
Redis lists kombu keeps for that queue (one per priority step, asked of a real kombu channel), and every
FARM_* setting named exists. Nothing is downloaded; without the package the schema check skips."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml
from celery import Celery
from pydantic import BaseModel, ConfigDict, Field

from farm.jobs.messages import StageMessages
from farm.settings import Settings
from tests.ops.conftest import OPS

MANIFESTS = sorted((OPS / "kubernetes").glob("*.yaml"))
KUBERNETES_VERSION = "1.30.0"
"""The oldest Kubernetes these manifests target (appArmorProfile in securityContext is 1.30+)."""


def _documents() -> list[tuple[Path, dict[str, Any]]]:
    return [(path, doc) for path in MANIFESTS for doc in yaml.safe_load_all(path.read_text()) if doc]


def _core(doc: dict[str, Any]) -> bool:
    return not str(doc["apiVersion"]).startswith("keda.sh/")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# Field names are KEDA's (camelCase).
class RedisListTrigger(_Strict):
    """The `redis` trigger's metadata, as KEDA's Redis Lists scaler documents it (keda.sh/docs/2.x/
    scalers/redis-lists): an address (or addressFromEnv, or host+port), the list and target length."""

    address: str | None = None
    addressFromEnv: str | None = None
    host: str | None = None
    port: str | None = None
    listName: str
    listLength: str = Field(pattern=r"^[0-9]+$")
    activationListLength: str | None = Field(None, pattern=r"^[0-9]+$")
    databaseIndex: str | None = Field(None, pattern=r"^[0-9]+$")
    enableTLS: Literal["true", "false"] | None = None
    usernameFromEnv: str | None = None
    passwordFromEnv: str | None = None


class Trigger(_Strict):
    type: Literal["redis"]
    metadata: RedisListTrigger


class ScaleTargetRef(_Strict):
    name: str
    apiVersion: str | None = None
    kind: str | None = None
    envSourceContainerName: str | None = None


class ScaledObjectSpec(_Strict):
    scaleTargetRef: ScaleTargetRef
    pollingInterval: int | None = Field(None, ge=1)
    cooldownPeriod: int | None = Field(None, ge=0)
    minReplicaCount: int | None = Field(None, ge=0)
    maxReplicaCount: int | None = Field(None, ge=1)
    advanced: dict[str, Any] | None = None
    triggers: list[Trigger] = Field(min_length=1)


class ScaledObject(_Strict):
    apiVersion: Literal["keda.sh/v1alpha1"]
    kind: Literal["ScaledObject"]
    metadata: dict[str, Any]
    spec: ScaledObjectSpec


def test_there_are_manifests_for_every_part() -> None:
    kinds = {(doc["kind"], doc["metadata"]["name"]) for _, doc in _documents()}
    for name in ("farm-api", "farm-flower", "farm-worker-init", "farm-worker-run", "farm-worker-eval"):
        assert ("Deployment", name) in kinds
    assert ("StatefulSet", "farm-redis") in kinds
    assert {name for kind, name in kinds if kind == "ScaledObject"} == {
        "farm-worker-init",
        "farm-worker-run",
        "farm-worker-eval",
    }


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_core_objects_match_the_kubernetes_schemas(path: Path) -> None:
    validator = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    for doc in (d for d in yaml.safe_load_all(path.read_text()) if d and _core(d)):
        try:
            validator.validate(doc, KUBERNETES_VERSION, strict=True)
        except validator.ValidationError as exc:
            pytest.fail(f"{path.name}: {doc['kind']} {doc['metadata']['name']}: {exc.message} at {exc.path}")


def test_a_misspelt_field_is_caught() -> None:
    """The schema check is strict: a field Kubernetes does not know fails it (else a typo deploys)."""
    validator = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    deployment = next(doc for _, doc in _documents() if doc["kind"] == "Deployment")
    broken = yaml.safe_load(yaml.safe_dump(deployment))
    broken["spec"]["template"]["spec"]["containers"][0]["envFrm"] = []
    with pytest.raises(validator.ValidationError):
        validator.validate(broken, KUBERNETES_VERSION, strict=True)


def _worker_queues(deployment: dict[str, Any]) -> set[str]:
    queues = set()
    for container in deployment["spec"]["template"]["spec"]["containers"]:
        command = container["command"]
        if "worker" in command:
            queues |= set(command[command.index("-Q") + 1].split(","))
    return queues


def test_each_scaled_object_measures_every_list_of_its_workers_queue(redis_url: str) -> None:
    docs = [doc for _, doc in _documents()]
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    messages = StageMessages(Celery("k8s-check", broker=redis_url))
    for raw in (d for d in docs if d["kind"] == "ScaledObject"):
        scaled = ScaledObject.model_validate(raw)
        target = deployments[scaled.spec.scaleTargetRef.name]
        measured = {t.metadata.listName for t in scaled.spec.triggers}
        queue = raw["metadata"]["name"].removeprefix("farm-worker-")
        assert queue in _worker_queues(target), (queue, _worker_queues(target))
        assert measured == set(messages.queue_keys(queue))
        assert (scaled.spec.minReplicaCount or 0) >= 1, "a worker must stay: the reaper runs in workers"


def test_every_farm_setting_named_exists() -> None:
    known = {f"FARM_{name.upper()}" for name in Settings.model_fields} | {"FARM_REDIS_ADDRESS"}
    named = set()
    for path in MANIFESTS:
        named |= set(re.findall(r"\b(FARM_[A-Z_]+)\b", path.read_text()))
    assert named <= known, named - known


def test_sandboxed_run_workers_share_the_init_pod() -> None:
    """init and the node's own run queue in one pod, one FARM_WORKDIR volume, FARM_NODE = the pod."""
    init = next(
        d for _, d in _documents() if (d["kind"], d["metadata"]["name"]) == ("Deployment", "farm-worker-init")
    )
    containers = init["spec"]["template"]["spec"]["containers"]
    assert _worker_queues(init) == {"init", "run.$(FARM_NODE)"}
    for container in containers:
        node = next(e for e in container["env"] if e["name"] == "FARM_NODE")
        assert node["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
        assert {"name": "work", "mountPath": "/var/lib/rollout-farm"} in container["volumeMounts"]
