"""Renders and builds sandbox images, with three caching modes:

- scratch: always build, under a fresh tag (nothing reused);
- versioned: reuse while the base image, the farm version and the rendered recipe are unchanged;
- lock: reuse while the base image and the lockfile's contents are unchanged (recipe tweaks do not rebuild).
"""

from __future__ import annotations

import hashlib
import shlex
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Literal

import jinja2
from pydantic import BaseModel, ConfigDict, Field

from containers.errors import RuntimeUnavailable

CacheMode = Literal["scratch", "versioned", "lock"]
ImageKind = Literal["apptainer", "docker"]
TEMPLATES = {"apptainer": "apptainer.def.j2", "docker": "Dockerfile.j2"}
TOOL_PACKAGES = ["ptyprocess>=0.7", "jupyter_client>=8", "ipykernel>=6.29"]
"""What the execution server and its tools need inside the image."""


def farm_version() -> str:
    """The installed rollout-farm's version (read from its distribution, not by importing the farm)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rollout-farm")
    except PackageNotFoundError:
        return "0.0.0"


class ImageSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    base_image: str
    """Docker reference (e.g. python:3.11-slim); for Apptainer, bootstrapped from docker:// by default."""
    bootstrap: str = "docker"
    apt_packages: list[str] = Field(default_factory=list)
    pip_packages: list[str] = Field(default_factory=list)
    lockfile: str | None = None
    """requirements-style lockfile installed with pip -r; its hash is the key in `lock` mode."""
    setup: list[str] = Field(default_factory=list)
    """Extra shell commands run at build time."""
    env: dict[str, str] = Field(default_factory=dict)
    python: str = "python3"
    workdir: str = "/workspace"


class BuildResult(BaseModel):
    ref: str
    """SIF path (Apptainer) or image tag (Docker): what goes into SandboxSpec.image."""
    cache_key: str
    cached: bool


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("containers.images", "templates"),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["shell_quote"] = shlex.quote
    return env


class ImageBuilder:
    def __init__(self, kind: ImageKind, cache_dir: str | Path, binary: str | None = None) -> None:
        self.kind = kind
        self.cache_dir = Path(cache_dir)
        default = (shutil.which("apptainer") or shutil.which("singularity")) if kind == "apptainer" else None
        self.binary = binary or default or (shutil.which("docker") if kind == "docker" else None)
        self._templates = _environment()

    def cache_key(self, spec: ImageSpec, mode: CacheMode) -> str:
        if mode == "scratch":
            return "scratch-" + uuid.uuid4().hex[:12]
        digest = hashlib.sha256()
        digest.update(f"{self.kind}\0{spec.base_image}\0".encode())
        if mode == "lock":
            if not spec.lockfile:
                raise ValueError("cache mode 'lock' needs spec.lockfile")
            digest.update(Path(spec.lockfile).read_bytes())
        else:
            digest.update(farm_version().encode() + b"\0")
            digest.update(self._render(spec, cache_key="").encode())
        return f"{mode[0]}{digest.hexdigest()[:16]}"

    def render(self, spec: ImageSpec, mode: CacheMode = "versioned") -> str:
        return self._render(spec, self.cache_key(spec, mode))

    def _render(self, spec: ImageSpec, cache_key: str) -> str:
        lockfile = Path(spec.lockfile) if spec.lockfile else None
        return self._templates.get_template(TEMPLATES[self.kind]).render(
            **spec.model_dump(exclude={"lockfile"}),
            cache_key=cache_key,
            farm_version=farm_version(),
            tool_packages=TOOL_PACKAGES,
            lockfile_name=lockfile.name if lockfile else None,
            lockfile_path=str(lockfile.resolve()) if lockfile else None,
        )

    def image_ref(self, spec: ImageSpec, cache_key: str) -> str:
        if self.kind == "apptainer":
            return str(self.cache_dir / f"{spec.name}-{cache_key}.sif")
        return f"rollout-farm/{spec.name}:{cache_key}"

    def build_argv(self, recipe: Path, ref: str, context: Path) -> list[str]:
        binary = self.binary or self.kind
        if self.kind == "apptainer":
            return [binary, "build", "--fakeroot", "--force", ref, str(recipe)]
        return [binary, "build", "--tag", ref, "--file", str(recipe), str(context)]

    def is_cached(self, ref: str) -> bool:
        if self.kind == "apptainer":
            return Path(ref).is_file()
        assert self.binary is not None
        probe = subprocess.run([self.binary, "image", "inspect", ref], capture_output=True, timeout=30)
        return probe.returncode == 0

    def build(self, spec: ImageSpec, mode: CacheMode = "versioned", timeout: float = 3600.0) -> BuildResult:
        if not self.binary:
            raise RuntimeUnavailable(f"no {self.kind} binary on PATH to build images")
        key = self.cache_key(spec, mode)
        ref = self.image_ref(spec, key)
        if mode != "scratch" and self.is_cached(ref):
            return BuildResult(ref=ref, cache_key=key, cached=True)
        context = self.cache_dir / "build" / f"{spec.name}-{key}"
        context.mkdir(parents=True, exist_ok=True)
        recipe = context / ("image.def" if self.kind == "apptainer" else "Dockerfile")
        recipe.write_text(self._render(spec, key))
        if spec.lockfile:
            shutil.copy2(spec.lockfile, context / Path(spec.lockfile).name)
        subprocess.run(self.build_argv(recipe, ref, context), check=True, timeout=timeout)
        return BuildResult(ref=ref, cache_key=key, cached=False)
