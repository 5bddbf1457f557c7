"""Re-record the conformance fixture from the real vLLM (ops/real_vllm must be built):

    python -m tests.emulation.record_vllm            # starts the server, records, stops it
    python -m tests.emulation.record_vllm --root http://127.0.0.1:PORT   # a server already running

Writes tests/emulation/vllm_conformance.json: the facts of each case (tests/emulation/cases.py) as the
real vLLM answered them, which test_vllm_conformance.py replays against the emulation.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import httpx

from tests.emulation.cases import Server, run_cases

FIXTURE = Path(__file__).with_name("vllm_conformance.json")
REAL_VLLM = Path(__file__).resolve().parents[2] / "ops" / "real_vllm"
GEMMA_EOS, GEMMA_END_OF_TURN = 1, 106
WINDOW = 1024
"""ops/real_vllm/serve.py's --max-model-len (FARM_REAL_VLLM_MAX_LEN unset)."""


def record(root: str, model: str) -> dict[str, object]:
    server = Server(root, model, WINDOW, GEMMA_EOS, (GEMMA_END_OF_TURN,), forced_stop=True)
    version = httpx.get(f"{root}/version", timeout=30).json()["version"]
    fixture = {"server": f"vllm {version}", "model": model, "facts": run_cases(server)}
    FIXTURE.write_text(json.dumps(fixture, indent=2, sort_keys=True) + "\n")
    return fixture


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", help="a real vLLM already serving (else one is started)")
    parser.add_argument("--model", default="gemma-3-270m")
    args = parser.parse_args()
    if args.root:
        print(json.dumps(record(args.root, args.model), indent=2))
        return
    sys.path.insert(0, str(REAL_VLLM))
    from serve import RealVllm

    with RealVllm.start() as server:
        print(json.dumps(record(server.root, server.model), indent=2))


if __name__ == "__main__":
    main()
