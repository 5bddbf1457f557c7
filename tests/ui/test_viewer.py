"""The viewer in a real browser against a real farm: pages render live data, actions go through the API."""

from __future__ import annotations

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from farm.launcher import LocalFarm
from tests.integration.jobs import submit, wait_state
from tests.ui.conftest import screenshot

pytestmark = pytest.mark.integration

PROBLEM = {"handler": "math", "question": "What is 84 * 76 + 123?", "answer": "6507"}


def test_live_page_shows_jobs_finishing_and_backends(farm: LocalFarm, api: httpx.Client, browser) -> None:
    browser.get(f"{farm.api_url}/ui/")
    wait = WebDriverWait(browser, 15)
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#backends tbody tr"))
    ids = [submit(api, PROBLEM) for _ in range(4)]
    for job_id in ids:
        assert wait_state(api, job_id, {"done", "failed"}).state.value in {"done", "failed"}
    # the page was not reloaded: the poll brings the finished jobs in
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#states .count-done"))
    done = int(browser.find_element(By.CSS_SELECTOR, "#states .count-done").text)
    assert done >= 1
    run_card = browser.find_element(By.CSS_SELECTOR, '.card[data-stage="run"]')
    assert "done" in run_card.text
    rows = browser.find_elements(By.CSS_SELECTOR, "#backends tbody tr")
    assert [r.get_attribute("data-address") for r in rows] == farm.llm_urls
    assert "healthy" in rows[0].text
    screenshot(browser, "live")
