"""Runs page: run files from FARM_RUNS_DIR, summary and charts, two runs side by side (real farm, real
browser); the path and chart rules as unit tests."""

from __future__ import annotations

import math
import re
from pathlib import Path

import httpx
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from selenium.webdriver.common.by import By

from farm.launcher import LocalFarm
from farm.models.results import JobResult, JobState, Timings
from farm.ui.runs import BOTTOM, HEIGHT, LEFT, RIGHT, TOP, WIDTH, axis, chart, resolve, tick_label
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


@example([(0.0, 0.0), (5e-324, 5e-324)])  # subnormal span: the scale would overflow to inf
@example([(3.0, 7.0)])  # one point
@given(st.lists(st.tuples(st.floats(-1e6, 1e6), st.floats(-1e6, 1e6)), max_size=50))
def test_chart_points_and_ticks_stay_in_the_plot_area(pairs: list[tuple[float, float]]) -> None:
    c = chart("t", [p[0] for p in pairs], [p[1] for p in pairs], x_label="x (s)", y_label="y (1/s)")
    points = [tuple(map(float, p.split(","))) for p in c.points.split()]
    assert len(points) == len(pairs)
    inside_x = lambda x: LEFT - 0.1 <= x <= WIDTH - RIGHT + 0.1  # noqa: E731
    inside_y = lambda y: TOP - 0.1 <= y <= HEIGHT - BOTTOM + 0.1  # noqa: E731
    assert all(inside_x(x) and inside_y(y) for x, y in points)
    assert (c.x_label, c.y_label) == ("x (s)", "y (1/s)")
    if pairs:
        assert len(c.x_ticks) >= 2 and len(c.y_ticks) >= 2
        assert all(inside_x(t.at) for t in c.x_ticks) and all(inside_y(t.at) for t in c.y_ticks)
        assert len({t.label for t in c.x_ticks}) == len(c.x_ticks)  # distinct labels: enough decimals
        assert len({t.label for t in c.y_ticks}) == len(c.y_ticks)
        assert c.x_min <= min(p[0] for p in pairs) and c.x_max >= max(p[0] for p in pairs)
        assert c.y_min <= min(0.0, *(p[1] for p in pairs)) and c.y_max >= max(p[1] for p in pairs)


@given(st.floats(-1e6, 1e6), st.floats(0, 1e6))
def test_axis_is_round_ticks_enclosing_the_data(lo: float, width: float) -> None:
    start, end, ticks = axis(lo, lo + width)
    assert start <= lo and end >= lo + width
    assert ticks[0] == start and abs(ticks[-1] - end) <= 1e-9 * max(1.0, abs(end))
    assert 2 <= len(ticks) <= 12
    step = ticks[1] - ticks[0]
    mantissa = step / 10 ** math.floor(math.log10(step) + 1e-9)
    assert min(abs(mantissa - m) for m in (1, 2, 2.5, 5, 10)) < 1e-6


def test_tick_labels_are_round_numbers() -> None:
    assert [tick_label(v, 2.5) for v in (0.0, 2.5, 5.0, 12.5)] == ["0", "2.5", "5.0", "12.5"]
    assert [tick_label(v, 0.2) for v in (0.0, 0.2, 1.0)] == ["0", "0.2", "1.0"]
    assert tick_label(-1e-17, 0.1) == "0" and tick_label(250000.0, 250000.0) == "250000"


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
        # every chart has both axes labelled with a unit, and numbered ticks on both
        for svg in section.find_elements(By.CSS_SELECTOR, "svg.chart"):
            x_label = svg.find_element(By.CSS_SELECTOR, "text.x-label").text
            y_label = svg.find_element(By.CSS_SELECTOR, "text.y-label").text
            assert x_label in ("time since the first submission (s)", "trainer step"), x_label
            assert y_label in ("finished jobs / s", "mean reward (running)", "mean reward"), y_label
            for kind in ("x-tick", "y-tick"):
                ticks = [t.text for t in svg.find_elements(By.CSS_SELECTOR, f"text.{kind}")]
                assert len(ticks) >= 2 and all(re.fullmatch(r"-?\d+(\.\d+)?", t) for t in ticks), ticks
            assert len(svg.find_elements(By.CSS_SELECTOR, "line.axis")) == 2
            assert svg.find_element(By.CSS_SELECTOR, "text.x-label").is_displayed()
        throughput = section.find_element(By.CSS_SELECTOR, "figure[data-title=Throughput] svg")
        assert throughput.find_element(By.CSS_SELECTOR, "text.y-label").text == "finished jobs / s"
    assert sections[0].location["y"] == sections[1].location["y"]  # side by side
    screenshot(browser, "runs")
