"""In-place weight updates, as RL trainers drive SGLang: load a checkpoint from disk without a restart and
label it with a weight version that every later generation reports.

Routes and shapes follow SGLang's http_server (github:sgl-project/sglang,
python/sglang/srt/entrypoints/http_server.py @ 9c0549b727fe; UpdateWeightFromDiskReqInput in
python/sglang/srt/managers/io_struct.py): `POST /update_weights_from_disk` {model_path, weight_version,
abort_all_requests, flush_cache, ...} answers {success, message, num_paused_requests} (200, or 400 when it
failed); `POST /update_weight_version` {new_version}; `GET /get_weight_version` and `GET /model_info` give
the version, and every /generate answer carries it in `meta_info.weight_version` (slime reads it there per
turn). vLLM's own update path (`/pause`, `/start_weight_update`, `/update_weights` with an NCCL or IPC
`update_info`, `/finish_weight_update`, `/resume`: vllm/entrypoints/serve/dev/rlhf/api_router.py @ 6fbea11)
moves tensors between GPUs and cannot be spoken by a CPU reference; the reference server answers the SGLang
routes in both emulation modes, and `/pause` + `/resume` as vLLM does.

A publish aborts nothing: a request in flight finishes on the weights it started with (the policy holds its
lock from first to last token), the next one runs on the new weights.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from fastapi import FastAPI
from fastapi.responses import JSONResponse
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

    @app.post("/pause")
    async def pause(mode: Literal["abort", "wait", "keep"] = "wait") -> JSONResponse:
        if mode == "abort":
            return JSONResponse({"error": "mode=abort is not supported: a publish here aborts nothing"}, 400)
        paused.clear()
        return JSONResponse({"status": "paused"})

    @app.post("/resume")
    async def resume() -> dict[str, str]:
        paused.set()
        return {"status": "resumed"}

    @app.get("/is_paused")
    async def is_paused() -> dict[str, bool]:
        return {"is_paused": not paused.is_set()}

    engine.gate = paused


def _answer(success: bool, message: str) -> JSONResponse:
    body = {"success": success, "message": message, "num_paused_requests": 0}
    return JSONResponse(body, status_code=200 if success else 400)
