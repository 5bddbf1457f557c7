"""FarmClient and AsyncFarmClient against a real HTTP server (the stand-in farm under uvicorn)."""

from __future__ import annotations

import asyncio

import pytest

from farm.client import AsyncFarmClient, FarmClient, FarmError, FarmTimeout, FarmUnavailable
from farm.models import JobState
from tests.client.conftest import _free_port
from tests.waiting import wait_until


def scripted(**fields: object) -> dict[str, object]:
    return {"handler": "scripted", "duration_s": 0.02, **fields}


def test_process_waits_for_the_final_result(farm_url: str) -> None:
    with FarmClient(farm_url) as farm:
        result = farm.process(scripted(rewards=[1.0]), {"temperature": 0.7}, job_id="j-1", metadata={"x": 1})
    assert result.job_id == "j-1"
    assert result.state is JobState.done
    assert result.reward == 1.0
    assert result.metadata["x"] == 1
    assert result.trajectory.traces[0].loss_mask == [1, 0, 1]


def test_process_polls_on_when_the_server_stops_waiting(farm_url: str) -> None:
    with FarmClient(farm_url) as farm:
        result = farm.process(scripted(rewards=[1.0], duration_s=0.3, server_wait_s=0.05), job_id="long")
        assert result.state is JobState.done and result.job_id == "long"
        again = farm.process(scripted(rewards=[0.0]), job_id="long")  # same id: waits, not requeued
        assert again.reward == 1.0


def test_submit_then_wait_and_get(farm_url: str) -> None:
    with FarmClient(farm_url) as farm:
        job_id = farm.submit(scripted(rewards=[0.0], duration_s=0.1))
        assert farm.get_job(job_id).state is not JobState.done
        assert farm.wait(job_id, timeout_s=5).reward == 0.0


def test_wait_times_out_naming_pending_jobs(farm_url: str) -> None:
    with FarmClient(farm_url) as farm:
        job_id = farm.submit(scripted(duration_s=5))
        with pytest.raises(FarmTimeout) as caught:
            farm.wait(job_id, timeout_s=0.2)
        assert caught.value.pending == [job_id]
        farm.cancel(job_id)


def test_as_completed_yields_in_finishing_order(farm_url: str) -> None:
    with FarmClient(farm_url) as farm:
        slow = farm.submit(scripted(duration_s=0.4), job_id="slow")
        fast = farm.submit(scripted(duration_s=0.05), job_id="fast")
        order = [result.job_id for result in farm.as_completed([slow, fast], timeout_s=5)]
    assert order == ["fast", "slow"]


def test_unknown_job_is_a_404_farm_error(farm_url: str) -> None:
    with FarmClient(farm_url) as farm, pytest.raises(FarmError) as caught:
        farm.get_job("nope")
    assert caught.value.status == 404
    assert "nope" in str(caught.value)


def test_422_keeps_the_detail_and_names_the_field(farm_url: str) -> None:
    with FarmClient(farm_url) as farm, pytest.raises(FarmError) as caught:
        farm.submit({"handler": "nonexistent"})
    assert caught.value.status == 422
    assert isinstance(caught.value.detail, list)
    assert "instance.handler" in str(caught.value)


def test_cancel_by_job_and_by_group(farm_url: str) -> None:
    with FarmClient(farm_url) as farm:
        one = farm.submit(scripted(duration_s=5))
        assert farm.cancel(one).state == "cancelled"
        assert farm.get_job(one).state is JobState.cancelled
        ids = [farm.submit(scripted(duration_s=5), metadata={"group_id": "g"}) for _ in range(3)]
        farm.cancel(group_id="g")
        assert {farm.get_job(i).state for i in ids} == {JobState.cancelled}
        with pytest.raises(ValueError):
            farm.cancel()


def test_backends_add_list_clear_and_swap(farm_url: str) -> None:
    with FarmClient(farm_url) as farm:
        farm.add_llm_server("http://127.0.0.1:9001/v1", weight=2)
        listed = farm.llm_servers()
        assert [(b.address, b.weight) for b in listed] == [("http://127.0.0.1:9001/v1", 2)]
        swapped = farm.swap_llm_servers(["http://a:1/v1", "http://b:2/v1"], kind="sglang")
        assert [b.address for b in swapped] == ["http://a:1/v1", "http://b:2/v1"]
        assert {b.kind for b in swapped} == {"sglang"}
        assert farm.clear_llm_servers() == []


def test_stop_refuses_work_until_start(farm_url: str) -> None:
    with FarmClient(farm_url) as farm:
        farm.stop()
        with pytest.raises(FarmError) as caught:
            farm.submit(scripted())
        assert caught.value.status == 503
        farm.start()
        assert farm.process(scripted(rewards=[1.0])).state is JobState.done
        assert farm.status()["running"] is True
        assert farm.healthz()


def test_task_api_submit_and_get(farm_url: str) -> None:
    with FarmClient(farm_url) as farm:
        answer = farm.submit_task({"task_id": "t1", "instance": {"rewards": [1.0, 0.0]}, "num_samples": 2})
        assert answer.session_ids == ["t1-0", "t1-1"]
        status = wait_until(
            lambda: farm.get_task("t1"), 5, accept=lambda task: task.state == "completed", what="t1 completed"
        )
    assert [s.result.reward for s in status.sessions if s.result] == [1.0, 0.0]


def test_bearer_token_is_sent(standin_token_server: str) -> None:
    with FarmClient(standin_token_server, token="wrong") as farm, pytest.raises(FarmError) as caught:
        farm.llm_servers()
    assert caught.value.status == 401
    with FarmClient(standin_token_server, token="s3cret") as farm:
        assert farm.llm_servers() == []
        assert farm.healthz()


def test_unreachable_farm_is_farm_unavailable() -> None:
    with FarmClient(f"http://127.0.0.1:{_free_port()}", timeout_s=1) as farm, pytest.raises(FarmUnavailable):
        farm.status()


def test_async_client_covers_the_same_calls(farm_url: str) -> None:
    async def scenario() -> None:
        async with AsyncFarmClient(farm_url) as farm:
            ids = [
                await farm.submit(scripted(rewards=[float(i)], duration_s=0.4 * (2 - i))) for i in range(3)
            ]
            finished = [result.job_id async for result in farm.as_completed(ids, timeout_s=5)]
            assert sorted(finished) == sorted(ids)
            assert finished[0] == ids[2]  # 0.4 s ahead of the next: completion order, not submission
            assert (await farm.process(scripted(rewards=[1.0]))).reward == 1.0
            await farm.add_llm_server("http://x:1/v1")
            assert len(await farm.llm_servers()) == 1
            with pytest.raises(FarmError):
                await farm.get_job("missing")

    asyncio.run(scenario())
