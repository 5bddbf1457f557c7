"""Non-finite numbers and lone surrogates anywhere in a request body: a 422 that names the field."""

from __future__ import annotations

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from farm.api.strict_json import body_errors

JSON = {"content-type": "application/json"}


def _post(api: httpx.Client, path: str, raw: str) -> httpx.Response:
    return api.post(path, content=raw.encode("utf-8", "surrogatepass"), headers=JSON)


def _locs(response: httpx.Response) -> list[list[object]]:
    assert response.status_code == 422, response.text
    return [e["loc"] for e in response.json()["detail"]]


@pytest.mark.parametrize("number", ["Infinity", "-Infinity", "NaN", "1e400", "-1e999", "1" + "0" * 400])
def test_non_finite_timeout_is_refused(api: httpx.Client, number: str) -> None:
    raw = '{"instance": {"handler": "noop"}, "wait": false, "timeout_s": ' + number + "}"
    assert _locs(_post(api, "/process", raw)) == [["body", "timeout_s"]]


def test_non_finite_deep_in_free_form_fields(api: httpx.Client) -> None:
    raw = (
        '{"instance": {"handler": "noop", "extra": [1, {"x": NaN}]}, "wait": false,'
        ' "metadata": {"policy_version": Infinity}, "sampling_params": {"temperature": 1e400}}'
    )
    assert _locs(_post(api, "/process", raw)) == [
        ["body", "instance", "extra", 1, "x"],
        ["body", "metadata", "policy_version"],
        ["body", "sampling_params", "temperature"],
    ]


def test_lone_surrogates_in_values_and_keys(api: httpx.Client) -> None:
    raw = '{"task_id": "t-sur", "instruction": "hi \\ud800 there", "metadata": {"k\\udfff": 1}}'
    assert _locs(_post(api, "/rollout/task/submit", raw)) == [["body", "instruction"], ["body", "metadata"]]
    assert api.get("/rollout/task/t-sur").status_code == 404


def test_raw_surrogate_bytes_are_not_json(api: httpx.Client) -> None:
    raw = '{"task_id": "t-raw", "instruction": "hi \ud800"}'
    assert _post(api, "/rollout/task/submit", raw).status_code == 422


def test_cancel_and_gateway_bodies_are_checked_too(api: httpx.Client) -> None:
    assert _locs(_post(api, "/cancel", '{"older_than_policy_version": Infinity}')) == [
        ["body", "older_than_policy_version"]
    ]
    raw = '{"model": "m", "messages": [{"role": "user", "content": "a"}], "temperature": NaN}'
    assert _locs(_post(api, "/gateway/v1/chat/completions", raw)) == [["body", "temperature"]]


def test_valid_pairs_and_large_finite_numbers_pass(api: httpx.Client) -> None:
    raw = (
        '{"instance": {"handler": "noop", "id": "\\ud83d\\ude00"}, "wait": false,'
        ' "timeout_s": 1e3, "metadata": {"big": 1.7976931348623157e308, "tiny": 1e-400}}'
    )
    response = _post(api, "/process", raw)
    assert response.status_code == 202, response.text


@given(
    st.recursive(
        st.none() | st.booleans() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
        max_leaves=20,
    )
)
def test_every_finite_well_formed_document_passes(document: object) -> None:
    import json

    assert body_errors(json.dumps(document, ensure_ascii=True).encode()) == []
    assert body_errors(json.dumps(document, ensure_ascii=False).encode()) == []


@given(
    st.lists(st.text(max_size=3), max_size=4), st.sampled_from([float("inf"), float("-inf"), float("nan")])
)
def test_a_non_finite_number_is_found_wherever_it_is(path: list[str], bad: float) -> None:
    import json

    document: object = bad
    for key in reversed(path):
        document = {key: document}
    errors = body_errors(json.dumps({"root": document}).encode())
    assert [e["loc"] for e in errors] == [["body", "root", *path]]


def test_models_refuse_non_finite_numbers_built_in_process() -> None:
    """Requests built in Python (the client library, tests) never reach the farm with inf either."""
    from pydantic import ValidationError

    from farm.models import ProcessRequest, SamplingParams, TaskRequest

    for build in (
        lambda: ProcessRequest(instance={"handler": "noop"}, timeout_s=float("inf")),
        lambda: SamplingParams(temperature=float("nan")),
        lambda: TaskRequest(task_id="t", instruction="x", timeout_seconds=float("inf")),
    ):
        with pytest.raises(ValidationError, match="finite"):
            build()
