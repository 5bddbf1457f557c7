"""Runs page: run files from FARM_RUNS_DIR, summary and charts, two runs side by side (real farm, real
browser); the path and chart rules as unit tests."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from selenium.webdriver.common.by import By

from farm.launcher import LocalFarm
from farm.models.results import JobResult, JobState, Timings
from farm.ui.runs import HEIGHT, WIDTH, chart, resolve
from tests.ui.conftest import RUNS_DIR, screenshot
from tests.waiting import wait_until


def write_run(path: Path, n: int, reward: float) -> None:
    lines = []
    for i in range(n):
        result = JobResult(
            job_id=f"{path.stem}-{i}",
            state=JobState.done,
            handler="math",
            reward=reward if i % 2 else 0.0,
            timings=Timings(queued=0.5, init=0.1, run=1.0 + i % 3, eval=0.1),
            metadata={"submitted_at": 1000.0 + i * 0.2, "step": i // 10},
        )
        lines.append(result.model_dump_json())
    path.write_text("\n".join(lines) + "\nnot json\n")


def test_resolve_rejects_paths_outside_the_runs_dir(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text("")
    assert resolve("a.jsonl", tmp_path) == tmp_path.resolve() / "a.jsonl"
    for bad in ("../etc/passwd", "/etc/passwd", ".hidden.jsonl", "a.txt", ""):
        with pytest.raises(Exception) as exc:
            resolve(bad, tmp_path)
        assert exc.value.status_code == 422 and "run" in exc.value.detail


@example([(0.0, 0.0), (5e-324, 5e-324)])  # subnormal span: the scale overflows to inf
@given(st.lists(st.tuples(st.floats(-1e6, 1e6), st.floats(-1e6, 1e6)), max_size=50))
def test_chart_points_stay_in_the_box(pairs: list[tuple[float, float]]) -> None:
    c = chart("t", [p[0] for p in pairs], [p[1] for p in pairs])
    points = [tuple(map(float, p.split(","))) for p in c.points.split()]
    assert len(points) == len(pairs)
    assert all(-0.1 <= x <= WIDTH + 0.1 and -0.1 <= y <= HEIGHT + 0.1 for x, y in points)


@pytest.mark.integration
@pytest.mark.slow  # a farm of its own and a browser: the CI slow step
def test_two_runs_side_by_side(farm: LocalFarm, api: httpx.Client, browser) -> None:
    write_run(RUNS_DIR / "baseline.jsonl", 40, 0.5)
    write_run(RUNS_DIR / "tuned.jsonl", 30, 1.0)
    assert api.get("/ui/runs", params={"run": "../x.jsonl"}).status_code in (303, 422)
    browser.get(f"{farm.api_url}/ui/runs")
    names = sorted(
        r.get_attribute("data-run") for r in browser.find_elements(By.CSS_SELECTOR, "#run-files tr[data-run]")
    )
    assert names == ["baseline.jsonl", "tuned.jsonl"]
    for box in browser.find_elements(By.CSS_SELECTOR, "#run-files input[type=checkbox]"):
        box.click()
    browser.find_element(By.ID, "compare").click()  # a form GET: the sections come with the next page
    sections = wait_until(
        lambda: browser.find_elements(By.CSS_SELECTOR, "section.run"), 10, what="the two runs' sections"
    )
    assert [s.get_attribute("data-run") for s in sections] == ["baseline.jsonl", "tuned.jsonl"] or [
        s.get_attribute("data-run") for s in sections
    ] == ["tuned.jsonl", "baseline.jsonl"]
    by_name = {s.get_attribute("data-run"): s for s in sections}
    assert by_name["baseline.jsonl"].find_element(By.CSS_SELECTOR, ".jobs").text == "40"
    assert by_name["tuned.jsonl"].find_element(By.CSS_SELECTOR, ".mean-reward").text == "0.500"
    assert "skipped lines" in by_name["tuned.jsonl"].text
    for section in sections:
        lines = section.find_elements(By.CSS_SELECTOR, "svg.chart polyline")
        assert len(lines) == 3 and all(line.get_attribute("points") for line in lines)
    assert sections[0].location["y"] == sections[1].location["y"]  # side by side
    screenshot(browser, "runs")
