"""The runs page's learning-run view: reward per step, a bar per step, and the policy versions that
sampled each step's turns (a job whose turns span a publish counts as mixed). Rendered with the viewer's
own templates and the report's own summary."""

from __future__ import annotations

import re

from farm.models.results import JobResult, JobState, Trace, Trajectory
from farm.report.summary import summarize
from farm.ui.routes import templates


def _result(step: int, reward: float, versions: list[int]) -> JobResult:
    trace = Trace(
        prompt_ids=[1, 2],
        response_ids=[3, 4, 5] * len(versions),
        loss_mask=[1, 1, 0] * len(versions),
        response_logprobs=[-0.1, -0.2, 0.0] * len(versions),
        metadata={"turn_policy_versions": versions},
    )
    return JobResult(
        job_id=f"s{step}-{reward}-{versions}",
        state=JobState.done,
        handler="math",
        reward=reward,
        trajectory=Trajectory(traces=[trace]),
        metadata={"step": step, "submitted_at": 1000.0 + step},
    )


def _render(results: list[JobResult]) -> str:
    page = templates.env.from_string(
        '{% from "_learning.html.j2" import learning_steps %}{{ learning_steps(s) }}'
    )
    return page.render(s=summarize(results))


def test_a_learning_run_shows_reward_and_turn_versions_per_step() -> None:
    html = _render(
        [
            _result(0, 0.0, [0, 0]),
            _result(0, 1.0, [0, 1]),  # a partial rollout: its second turn came after the publish
            _result(1, 1.0, [1, 1]),
            _result(1, 1.0, [1, 2]),
            _result(2, 1.0, [2]),
        ]
    )
    rows = re.findall(r'<tr data-step="(\d+)">(.*?)</tr>', html, re.S)
    assert [step for step, _ in rows] == ["0", "1", "2"]
    cells = {step: re.findall(r"<td[^>]*>(.*?)</td>", row, re.S) for step, row in rows}
    assert [c[2] for c in cells.values()] == ["0.500", "1.000", "1.000"]
    assert re.search(r'width="50.0"', cells["0"][4]) and re.search(r'width="100.0"', cells["1"][4])
    assert [c[5] for c in cells.values()] == ["0, 1", "1, 2", "2"]
    assert [c[6] for c in cells.values()] == ["1", "1", "0"]


def test_a_run_without_steps_shows_no_learning_view() -> None:
    assert "Learning run" not in _render([_result(0, 1.0, [0]), _result(0, 0.0, [0])])
