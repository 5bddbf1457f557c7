"""The harness matrix: every supported harness CLI, unchanged and at default settings, fixes calc.py
through the gateway against the session farm's scripted reference policy (issue 16).

Each CLI is installed from the npm registry into the cache shared with test_harness_cli (skipped with the
reason when node/npm are missing or the registry is unreachable). Per harness: the job is done, the
harness exits 0, the reward is 1, every model call is recorded, and both builders give traces whose
sampled spans are exactly the recorded tokens and logprobs. The machine is shared: run one or two at a
time, e.g. `pytest tests/integration/test_harness_matrix.py -m slow -k "pi or opencode"`.
"""

from __future__ import annotations

import subprocess
import uuid

import httpx
import pytest

from farm.builders import CompletionRecord, build_traces
from farm.models import Trace
from farm.models.results import JobState
from handlers.harness.clis import HARNESS_CLIS, CliUnavailable, install_cli
from tests.integration.test_harness_cli import fix_calc

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _installed(harness: str) -> str:
    try:
        binary = install_cli(HARNESS_CLIS[harness])
    except CliUnavailable as exc:
        pytest.skip(str(exc))
    version = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=120)
    assert version.returncode == 0, version
    return str(binary)


def _assert_faithful(trace: Trace, records: dict[str, CompletionRecord]) -> None:
    assert len(trace.response_ids) == len(trace.loss_mask) == len(trace.response_logprobs)
    for segment, cid in zip(trace.metadata["segments"], trace.metadata["completion_ids"], strict=True):
        span = slice(segment["start"], segment["start"] + segment["length"])
        assert trace.response_ids[span] == records[cid].response_ids
        assert set(trace.loss_mask[span]) == {1}
        if records[cid].response_logprobs is not None:
            assert trace.response_logprobs[span] == records[cid].response_logprobs


@pytest.mark.parametrize("harness", sorted(HARNESS_CLIS))
def test_harness_completes_the_sample_task_with_defaults(api: httpx.Client, harness: str) -> None:
    binary = _installed(harness)
    task = f"{harness}-fix-{uuid.uuid4().hex[:8]}"
    result = fix_calc(api, task, harness, binary, 300)
    assert result.state is JobState.done, (result.error, result.artifacts)
    artifacts = result.artifacts
    assert artifacts["exit_code"] == 0, artifacts.get("stderr_tail")
    assert result.reward == 1.0, artifacts.get("test")

    completions = api.get(f"/gateway/sessions/{artifacts['gateway_session_id']}/completions").json()
    assert artifacts["completion_count"] == len(completions) >= 2
    records = {c["completion_id"]: CompletionRecord.model_validate(c) for c in completions}
    assert all(r.has_tokens for r in records.values()), "a call was recorded without its tokens"

    merged = result.trajectory.traces
    covered = [cid for t in merged for cid in t.metadata["completion_ids"]]
    assert sorted(covered) == sorted(records)
    for trace in merged:
        _assert_faithful(trace, records)
        assert not trace.metadata["retokenization_drift"], trace.metadata["drift"]
    per_request = build_traces("per_request", list(records.values()))
    assert len(per_request) == len(records)
    for trace in per_request:
        [cid] = trace.metadata["completion_ids"]
        assert trace.prompt_ids == records[cid].prompt_ids
        assert trace.response_ids == records[cid].response_ids and set(trace.loss_mask) == {1}
