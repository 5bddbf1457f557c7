"""The conformance fixture the emulation is compared with (tests/emulation/vllm_conformance.json) still says
what this vLLM answers: the same cases run against the real server. When vLLM changes, re-record it with
`python -m tests.emulation.record_vllm` and look at what the emulation must follow."""

from __future__ import annotations

import json

import pytest

from tests.emulation.cases import Server, run_cases
from tests.emulation.record_vllm import FIXTURE, GEMMA_END_OF_TURN, GEMMA_EOS, WINDOW
from tests.real_server.conftest import RealVllm

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(1200)]


def test_the_fixture_is_what_vllm_answers(real_vllm: RealVllm) -> None:
    ends = (GEMMA_END_OF_TURN,)
    server = Server(real_vllm.root, real_vllm.model, WINDOW, GEMMA_EOS, ends, forced_stop=True)
    recorded = json.loads(FIXTURE.read_text())["facts"]
    assert run_cases(server) == recorded
