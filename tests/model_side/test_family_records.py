"""The family records (farm/chat/families) are the one source of detection, the parser registry and
docs/FAMILIES.md: each record's example is a call its parser reads, each published template it names
makes detection pick it, no marker or name belongs to two families, and the doc says what they say."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from farm.chat.families import ALIASES, FAMILIES, FORMATS, detect
from farm.chat.families.record import ModelFamily, ToolCallFormat
from farm.chat.tool_parsers import parse_with

ASSETS = Path(__file__).resolve().parents[2] / "farm" / "chat" / "assets"
PAIRS = [(family, fmt) for family in FAMILIES for fmt in family.formats]


def _id(pair: tuple[ModelFamily, ToolCallFormat]) -> str:
    return f"{pair[0].name}/{pair[1].name}"


@pytest.mark.parametrize("pair", PAIRS, ids=[_id(p) for p in PAIRS])
def test_each_example_is_one_call_its_parser_reads(pair: tuple[ModelFamily, ToolCallFormat]) -> None:
    _, fmt = pair
    parsed = parse_with(fmt.name, "Let me run it. " + fmt.example, "")
    assert parsed.errors == []
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == [("python", {"code": "print(1)"})]
    assert fmt.attempted(fmt.example)


@pytest.mark.parametrize("pair", PAIRS, ids=[_id(p) for p in PAIRS])
def test_detection_picks_each_format_from_its_vocabulary_and_template(
    pair: tuple[ModelFamily, ToolCallFormat],
) -> None:
    family, fmt = pair
    template = (ASSETS / fmt.template).read_text() if fmt.template else ""
    picks = [fmt.vocabulary_has] if fmt.vocabulary_has and fmt is not family.formats[0] else []
    vocabulary = {*family.markers[:1], *picks}
    found_family, found_format = detect(vocabulary.__contains__, template)
    assert (found_family.name, found_format.name) == (family.name, fmt.name)


def test_markers_and_names_belong_to_one_family() -> None:
    markers = [m for family in FAMILIES for m in family.markers]
    assert len(markers) == len(set(markers))
    assert [f for f in FAMILIES if not f.markers] == [FAMILIES[0]]
    assert not set(ALIASES) & set(FORMATS)
    for family in FAMILIES:
        assert all(FORMATS[f.name] is f for f in family.formats)


def test_docs_families_md_is_what_the_records_say() -> None:
    script = Path(__file__).resolve().parents[2] / "ops" / "families_doc.py"
    done = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True)
    assert done.returncode == 0, "docs/FAMILIES.md is stale: run `python ops/families_doc.py`"
