"""A real farm (private Redis, API over HTTP, Celery workers, a reference LLM server) and a headless
Chromium driven by selenium. Browser tests skip, saying why, where Chromium or selenium is missing."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from farm.embedded_redis import EmbeddedRedis
from farm.launcher import LocalFarm
from tests.farms import emptied, stage_workers, temp_farm

SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
RUNS_DIR = Path(tempfile.mkdtemp(prefix="farm-ui-runs-"))
"""The farm's FARM_RUNS_DIR: tests write run files here and open them at /ui/runs."""


@pytest.fixture(scope="session")
def farm(session_farm_redis: EmbeddedRedis) -> Iterator[LocalFarm]:
    local = temp_farm(
        "farm-ui-logs-",
        redis_url=emptied(session_farm_redis.url),
        workers=stage_workers(2, 4, 2),
        llm_args=["--accuracy", "0.5", "--seed", "7", "--token-latency-ms", "2"],
        env={"FARM_RUNS_DIR": str(RUNS_DIR)},
    )
    with local.start(timeout_s=90):
        yield local


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip("chromium and chromedriver are not installed (apt-get install chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (the test extra)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def screenshot(driver: object, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    driver.save_screenshot(str(path))  # type: ignore[attr-defined]
    return path
