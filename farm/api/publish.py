"""POST /publish_weights: the trainer's one publish operation. Each backend of the pool is updated through its
own server's routes (farm/inference/publish.py), all at once; a backend is labelled with the new
`policy_version` only once its server has confirmed it, and one whose update cannot be confirmed leaves the
pool with the reason. While a backend is being published its registration says so (`publishing`), so a model
call that starts or ends meanwhile records that its turn may span the change (farm/agent/versions.py)."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import asdict

import httpx
from fastapi import APIRouter, Depends, HTTPException

from farm.api.state import FarmState, farm_state
from farm.inference.publish import publish_to
from farm.models.backends import BackendInfo
from farm.models.publish import BackendPublish, PublishRequest, PublishResult
from farm.pool import normalise_address
from farm.web.responses import errors
from farm.web.security import require_token

log = logging.getLogger(__name__)
router = APIRouter(dependencies=[Depends(require_token)], responses=errors(401, 413))


@router.post("/publish_weights", response_model=PublishResult, responses=errors(404, 409))
async def publish_weights(body: PublishRequest, farm: FarmState = Depends(farm_state)) -> PublishResult:
    """Publish a checkpoint to every backend (or `addresses`) in its server's own protocol, confirm the
    version from each server, then label the pool; no request in flight is aborted (their count and any
    abort the server reports are in the answer)."""
    backends = await _targets(farm, body.addresses)
    started = time.monotonic()
    limits = httpx.Timeout(body.timeout_s, connect=5.0)
    async with httpx.AsyncClient(timeout=limits, follow_redirects=False) as http:
        reports = await asyncio.gather(*(_publish_one(farm, b, body, http) for b in backends))
    counted = [r.aborted for r in reports if r.aborted is not None]
    return PublishResult(
        policy_version=body.policy_version,
        backends=list(reports),
        confirmed=sum(r.confirmed for r in reports),
        removed=sum(r.removed for r in reports),
        in_flight=sum(r.in_flight for r in reports),
        aborted=sum(counted) if counted else None,
        aborts_uncounted=len(reports) - len(counted),
        seconds=time.monotonic() - started,
    )


async def _targets(farm: FarmState, addresses: list[str] | None) -> list[BackendInfo]:
    registered = await farm.pool.list()
    if addresses is None:
        if not registered:
            raise HTTPException(status_code=409, detail="no backend is registered: nothing to publish to")
        return registered
    by_address = {b.address: b for b in registered}
    wanted = [normalise_address(a) for a in addresses]
    unknown = [a for a in wanted if a not in by_address]
    if unknown:
        raise HTTPException(status_code=404, detail=f"no backend registered at {', '.join(unknown)}")
    return [by_address[a] for a in dict.fromkeys(wanted)]


async def _publish_one(
    farm: FarmState, backend: BackendInfo, body: PublishRequest, http: httpx.AsyncClient
) -> BackendPublish:
    address = backend.address
    await farm.pool.set_publishing(address, body.policy_version)

    async def in_flight() -> int:
        info = await farm.pool.get(address)
        return info.in_flight if info is not None else 0

    outcome = await publish_to(
        address,
        backend.kind,
        body.policy_version,
        body.weights_path,
        pause=body.pause,
        timeout_s=body.timeout_s,
        http=http,
        paused=in_flight,
    )
    report = BackendPublish(**asdict(outcome))
    if report.confirmed:
        await farm.pool.set_policy_version(address, body.policy_version)
        return report
    log.warning("publish of version %s to %s not confirmed: %s", body.policy_version, address, report.reason)
    await farm.pool.remove(address)
    return report.model_copy(update={"removed": True})
