"""The job page shows which tool-call parser ran and each turn whose call it could not read, and the flag
of a job whose every turn was such a miss (pure rendering of the page template)."""

from __future__ import annotations

from farm.models.results import JobResult, JobState, Trace, Trajectory
from farm.ui.routes import templates
from farm.ui.trajectory import job_view


def test_the_job_page_shows_the_parser_misses_and_the_flag() -> None:
    miss = {
        "turn": 1,
        "errors": ["this looks like a `llama3_json` tool call, but the farm reads `hermes` calls"],
    }
    trace = Trace(
        prompt_ids=[1],
        response_ids=[2, 3],
        loss_mask=[1, 1],
        response_logprobs=[0.0, 0.0],
        finish_reason="tool_call_misses",
        metadata={
            "tool_call_parser": "hermes",
            "tool_call_misses": [miss],
            "flag": "every turn held a tool call",
        },
    )
    view = job_view(
        JobResult(job_id="j", state=JobState.done, handler="math", trajectory=Trajectory(traces=[trace]))
    )
    assert view.traces[0].tool_call_misses == [miss]
    html = templates.get_template("job.html.j2").render(job=view, active="job", request=None)
    assert "parser hermes" in html and 'id="flag-0"' in html
    assert "turn 1: this looks like a `llama3_json` tool call" in html
