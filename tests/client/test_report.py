"""`farm report`: loading, time placement, summary numbers, the click command and its plots."""

from __future__ import annotations

import builtins
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from farm.models import JobResult, JobState, StageError, Timings, Trace, Trajectory
from farm.report import load_run, spans, summarize
from farm.report.cli import report
from farm.report.summary import percentiles, throughput_series


def job(i: int, *, reward: float | None = 1.0, state: JobState = JobState.done, **metadata: Any) -> JobResult:
    trace = Trace(prompt_ids=[1], response_ids=[2, 3], loss_mask=[1, 0], response_logprobs=[-0.1, 0.0])
    return JobResult(
        job_id=f"j{i}",
        state=state,
        handler="math",
        reward=reward,
        trajectory=Trajectory(traces=[trace] if state is JobState.done else []),
        timings=Timings(queued=0.5, init=0.1 * i, run=1.0, eval=0.2),
        error=StageError(stage="run", type="Timeout", message="t") if state is JobState.timeout else None,
        metadata=metadata,
    )


def write_run(path: Path, results: list[JobResult], junk: bool = False) -> Path:
    lines = [r.model_dump_json() for r in results]
    if junk:
        lines.insert(1, "not json")
        lines.append(json.dumps({"job_id": "x"}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_load_run_skips_bad_lines(tmp_path: Path) -> None:
    run = load_run(write_run(tmp_path / "run.jsonl", [job(0), job(1)], junk=True))
    assert [r.job_id for r in run.results] == ["j0", "j1"]
    assert run.skipped_lines == [2, 4]


def test_spans_use_timestamps_then_derive() -> None:
    results = [
        job(0, submitted_at=100.0, finished_at=103.0),
        job(1, finished_at=110.0),  # submitted = finished - (queued + stages) = 110 - 1.8
        job(2, submitted_at=101.0),  # finished = submitted + 1.9
    ]
    a, b, c = spans(results)
    assert (a.submitted, a.finished) == (0.0, 3.0)
    assert b.submitted == pytest.approx(8.2) and b.finished == pytest.approx(10.0)
    assert c.submitted == 1.0 and c.finished == pytest.approx(2.9)


def test_spans_without_timestamps_count_from_zero() -> None:
    [only] = spans([job(3)])
    assert only.submitted == 0.0 and only.finished == pytest.approx(0.5 + 0.3 + 1.0 + 0.2)


def test_summary_numbers() -> None:
    results = [
        job(0, reward=1.0, step=0),
        job(1, reward=0.0, step=0),
        job(2, reward=1.0, step=1),
        job(3, reward=None, state=JobState.timeout, step=1),
    ]
    summary = summarize(results)
    assert summary.by_state == {"done": 3, "timeout": 1}
    assert summary.errors == {"run/Timeout": 1}
    assert summary.scored == 3 and summary.mean_reward == pytest.approx(2 / 3)
    assert [(s.step, s.jobs, s.solved) for s in summary.steps] == [(0, 2, 0.5), (1, 1, 1.0)]
    assert summary.stage_times["run"].p50 == 1.0
    assert summary.traces == 3 and summary.trained_tokens == 3
    assert summary.wall_time_s == pytest.approx(0.5 + 0.3 + 1.0 + 0.2)
    assert summary.rollouts_per_s == pytest.approx(3 / summary.wall_time_s)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0, 1e4, allow_nan=False), min_size=1, max_size=50))
def test_percentiles_are_ordered(values: list[float]) -> None:
    p = percentiles(values)
    assert min(values) - 1e-6 <= p.p50 <= p.p90 + 1e-6 <= p.p99 + 2e-6 <= p.max + 3e-6
    assert p.count == len(values)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0.01, 100, allow_nan=False), min_size=1, max_size=60))
def test_throughput_series_integrates_to_the_job_count(finish_times: list[float]) -> None:
    from farm.report.runs import Span

    centres, rates = throughput_series([Span(0.0, f) for f in finish_times], bins=10)
    width = max(finish_times) / 10
    assert len(centres) == len(rates) == 10
    assert sum(rate * width for rate in rates) == pytest.approx(len(finish_times))


def test_cli_prints_tables_and_writes_plots(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    run = write_run(tmp_path / "run.jsonl", [job(i, submitted_at=0.1 * i, step=i // 2) for i in range(6)])
    result = CliRunner().invoke(report, [str(run), "--out", str(tmp_path / "plots")])
    assert result.exit_code == 0, result.output
    assert "rollouts / s" in result.output and "Stage times" in result.output
    for name in ("throughput.png", "stage_times.png", "reward_per_step.png"):
        data = (tmp_path / "plots" / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_without_matplotlib_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_matplotlib(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    run = write_run(tmp_path / "run.jsonl", [job(0)])
    result = CliRunner().invoke(report, [str(run)])
    assert result.exit_code == 0, result.output
    assert "plots skipped" in result.output and "pip install -e '.[report]'" in result.output


def test_cli_json_and_empty_file(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run.jsonl", [job(0), job(1)])
    result = CliRunner().invoke(report, [str(run), "--json", "--no-plots"])
    assert result.exit_code == 0
    assert json.loads(result.output)["jobs"] == 2
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    failed = CliRunner().invoke(report, [str(empty)])
    assert failed.exit_code != 0 and "no JobResult" in failed.output


def test_expand_takes_files_and_globs_once_each(tmp_path: Path) -> None:
    from farm.report.runs import expand

    a = write_run(tmp_path / "demo-1.jsonl", [job(0)])
    b = write_run(tmp_path / "demo-2.jsonl", [job(1)])
    assert expand([str(tmp_path / "demo-*.jsonl"), str(a)]) == [a, b]
    with pytest.raises(FileNotFoundError):
        expand([str(tmp_path / "nothing-*.jsonl")])


def test_cli_takes_a_glob_matching_many_files(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    for n in range(2):
        write_run(
            tmp_path / f"demo-{n}.jsonl", [job(i, reward=float(n), problem_id=f"p{i}") for i in range(3)]
        )
    result = CliRunner().invoke(report, [str(tmp_path / "demo-*.jsonl"), "--out", str(tmp_path / "plots")])
    assert result.exit_code == 0, result.output
    assert "Per run file" in result.output and "demo-1.jsonl" in result.output
    assert (tmp_path / "plots" / "reward_by_run.png").exists()
    missing = CliRunner().invoke(report, [str(tmp_path / "nope-*.jsonl")])
    assert missing.exit_code != 0 and "no run file matches" in missing.output


def test_single_step_run_plots_reward_by_problem(tmp_path: Path) -> None:
    from farm.report.summary import reward_by_group

    pytest.importorskip("matplotlib")
    results = [job(i, reward=float(i % 2), problem_id=f"p{i // 2}") for i in range(6)]
    assert [(g, n) for g, n, _ in reward_by_group(results)] == [("p0", 2), ("p1", 2), ("p2", 2)]
    run = write_run(tmp_path / "demo.jsonl", results)
    result = CliRunner().invoke(report, [str(run), "--out", str(tmp_path / "plots")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "plots" / "reward_by_problem.png").exists()
    assert not (tmp_path / "plots" / "reward_per_step.png").exists()


def test_a_learning_run_prints_its_reward_curve_and_turn_versions(tmp_path: Path) -> None:
    """Reward per step with a text bar (the curve, with or without plots) and the policy versions that
    sampled each step's turns; a job whose turns span a publish counts as mixed."""
    results = []
    for step, rewards in enumerate([(0.0, 0.0), (0.0, 1.0), (1.0, 1.0)]):
        for i, reward in enumerate(rewards):
            result = job(10 * step + i, reward=reward, step=step)
            result.trajectory.traces[0].metadata["turn_policy_versions"] = [step, step + i]
            results.append(result)
    run = write_run(tmp_path / "learn.jsonl", results)
    printed = CliRunner().invoke(report, [str(run), "--no-plots"], terminal_width=200)
    assert printed.exit_code == 0, printed.output
    rows = [line for line in printed.output.splitlines() if "█" in line or "····" in line]
    assert len(rows) == 3
    assert rows[0].count("█") == 0 and rows[1].count("█") == 10 and rows[2].count("█") == 20
    assert "2, 3" in rows[2] and "0, 1" in rows[0]
