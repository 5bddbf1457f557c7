"""Reading per-test outcomes from `pytest -rA` output, and the paths a diff touches."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from handlers.swe.evaluation import patched_paths
from handlers.swe.pytest_log import MISSING, STATUSES, files_of, outcomes, passed

HEADER = "=========================== short test summary info ============================"
word = st.text("abcxyz_019", min_size=1, max_size=8)
# Parameter ids: pytest escapes non-ASCII, so printable ASCII with spaces, dashes, colons and brackets,
# but no closing bracket (the id ends there).
param = st.text(st.characters(min_codepoint=32, max_codepoint=126, blacklist_characters="]"), max_size=12)


@st.composite
def node_ids(draw: st.DrawFn) -> str:
    path = f"tests/{draw(word)}/test_{draw(word)}.py"
    cls = draw(st.one_of(st.none(), word.map(lambda w: f"Test{w}")))
    name = f"test_{draw(word)}"
    suffix = draw(st.one_of(st.none(), param.map(lambda p: f"[{p}]")))
    return "::".join(p for p in (path, cls, name) if p) + (suffix or "")


def line(status: str, test_id: str, message: str | None) -> str:
    return f"{status} {test_id}" + (f" - {message}" if message else "")


results = st.dictionaries(
    node_ids(),
    st.tuples(st.sampled_from(STATUSES), st.one_of(st.none(), st.text("ab -:\u00e9\n", max_size=20))),
    max_size=12,
)


@given(
    results=results,
    absent=st.lists(node_ids(), max_size=3),
    noise=st.lists(st.text("PASEDF tx:-\n", max_size=20), max_size=5),
)
def test_each_asked_id_gets_its_status_or_missing(
    results: dict[str, tuple[str, str | None]], absent: list[str], noise: list[str]
) -> None:
    body = [
        line(status, test_id, msg.replace("\n", " ") if msg else msg)
        for test_id, (status, msg) in results.items()
    ]
    # What the code under test printed earlier, including a forged summary, must not count.
    forged = [HEADER, *(f"PASSED {t}" for t in [*results, *absent])]
    log = "\n".join([*noise, *forged, "captured output", HEADER, *body, "==== 3 passed in 0.1s ===="])
    asked = [*results, *absent]
    got = outcomes(log, asked)
    for test_id in asked:
        expected = results[test_id][0] if test_id in results else MISSING
        assert got[test_id] == expected, (test_id, log)


def test_a_test_reported_twice_keeps_its_worst_outcome() -> None:
    log = "\n".join([HEADER, "PASSED t.py::a", "PASSED t.py::b", "ERROR t.py::a - RuntimeError: teardown"])
    assert outcomes(log, ["t.py::a", "t.py::b"]) == {"t.py::a": "ERROR", "t.py::b": "PASSED"}


def test_without_a_summary_header_every_line_is_read_and_colour_is_ignored() -> None:
    log = "\x1b[32mPASSED\x1b[0m t.py::a\nFAILED t.py::b - assert 1 == 2"
    assert outcomes(log, ["t.py::a", "t.py::b", "t.py::c"]) == {
        "t.py::a": "PASSED",
        "t.py::b": "FAILED",
        "t.py::c": MISSING,
    }


def test_passing_is_passed_or_expected_failure() -> None:
    assert [s for s in (*STATUSES, MISSING) if passed(s)] == ["PASSED", "XFAIL"]


def test_real_pytest_output(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_mix.py").write_text(
        "import pytest\n\n"
        "def test_ok():\n    print('PASSED tests/test_mix.py::test_bad')\n\n"
        "def test_bad():\n    assert 1 == 2, 'a - b'\n\n"
        "@pytest.mark.parametrize('x', ['a b', 'c - d', '[e]'])\n"
        "def test_p(x):\n    assert x != 'c - d'\n\n"
        "@pytest.mark.xfail\ndef test_xf():\n    assert 0\n\n"
        "@pytest.mark.skip(reason='no')\ndef test_sk():\n    pass\n\n"
        "@pytest.fixture\ndef broken():\n    yield\n    raise RuntimeError('teardown')\n\n"
        "def test_td(broken):\n    pass\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-rA", f"--rootdir={tmp_path}", "-p", "no:cacheprovider", "tests"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
    )
    ids = [
        "test_ok",
        "test_bad",
        "test_p[a b]",
        "test_p[c - d]",
        "test_p[[e]]",
        "test_xf",
        "test_sk",
        "test_td",
    ]
    got = outcomes(done.stdout, [f"tests/test_mix.py::{i}" for i in ids])
    assert [got[f"tests/test_mix.py::{i}"] for i in ids] == [
        "PASSED", "FAILED", "PASSED", "FAILED", "PASSED", "XFAIL", MISSING, "ERROR",
    ]  # fmt: skip


def test_files_of_node_ids() -> None:
    ids = ["tests/a.py::t[x::y]", "tests/b.py::C::t", "tests/a.py::u", "tests/c.py"]
    assert files_of(ids) == ["tests/a.py", "tests/b.py", "tests/c.py"]


def test_patched_paths_old_and_new_names() -> None:
    diff = (
        "diff --git a/src/m.py b/src/m.py\n--- a/src/m.py\n+++ b/src/m.py\n@@ -1 +1 @@\n-a\n+b\n"
        "diff --git a/tests/new.py b/tests/new.py\nnew file mode 100644\n--- /dev/null\n+++ b/tests/new.py\n"
        "@@ -0,0 +1 @@\n+x\n"
        "--- a/old name.py\t2024-01-01\n+++ b/new name.py\t2024-01-01\n"
    )
    assert patched_paths(diff) == ["src/m.py", "tests/new.py", "old name.py", "new name.py"]
