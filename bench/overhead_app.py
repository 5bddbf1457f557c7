"""The farm's Celery app plus a bare three-task chain, so one set of worker processes serves both
the farm and its baseline in bench/overhead.py (`celery -A bench.overhead_app worker ...`)."""

from __future__ import annotations

from farm.celery_app import app
from farm.settings import get_settings

app.conf.result_backend = get_settings().redis_url


@app.task(name="bare.init", ignore_result=True)
def bare_init() -> None:
    return None


@app.task(name="bare.run", ignore_result=True)
def bare_run() -> None:
    return None


@app.task(name="bare.eval", ignore_result=False)
def bare_eval() -> str:
    return "ok"


__all__ = ["app", "bare_eval", "bare_init", "bare_run"]
