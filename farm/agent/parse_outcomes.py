"""Tool-call parsing as data: each assistant turn's parse outcome, and the farm-wide counts per model
family and parser that /metrics exports and `farm report` turns into an unparsed rate.

An outcome is one of:
- `calls`: the selected parser read every call the turn held;
- `no_call`: plain text, no call attempted;
- `unparsed`: another known parser (farm/chat/families FORMATS) reads more calls from the turn's
  text than the selected one did: the calls were there, in a syntax this job's parser does not read
  (training and evaluation with different parsers, verifiers#2027);
- `malformed`: the selected parser (or a signature of another syntax) saw a call it could not read
  (arguments not JSON, a required argument missing, a call cut off).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from farm import keys
from farm.chat.families import FORMATS
from farm.chat.tool_calls import ParsedAssistant
from farm.chat.tool_parsers import parse_with


class ParseOutcome(StrEnum):
    calls = "calls"
    no_call = "no_call"
    unparsed = "unparsed"
    malformed = "malformed"


STATS_PREFIX = keys.TOOL_CALL_PARSE
"""The stats field of a (family, parser, outcome): `{STATS_PREFIX}{family}|{parser}|{outcome}`."""


@dataclass(frozen=True)
class TurnParse:
    turn: int
    parser: str
    outcome: ParseOutcome
    calls: int
    """Calls the selected parser read."""
    would_parse: list[str] = field(default_factory=list)
    """Other parsers that read more calls from the same text (for `unparsed`)."""
    errors: list[str] = field(default_factory=list)

    def record(self) -> dict[str, Any]:
        """What a trace's `metadata.turn_parses` holds for this turn."""
        return {
            "turn": self.turn,
            "parser": self.parser,
            "outcome": self.outcome.value,
            "calls": self.calls,
            "would_parse": list(self.would_parse),
            "errors": list(self.errors),
        }


def classify(
    turn: int, parser: str, text: str, parsed: ParsedAssistant, parse_as: Callable[[str], ParsedAssistant]
) -> TurnParse:
    """The outcome of one turn's sampled `text` read by `parser` into `parsed`; `parse_as(other)` reads
    the same text with another parser (only those whose call signature occurs in it are tried)."""
    found = len(parsed.tool_calls)
    would = [
        other
        for other, fmt in FORMATS.items()
        if other != parser and fmt.attempted(text) and len(parse_as(other).tool_calls) > found
    ]
    if would:
        outcome = ParseOutcome.unparsed
    elif parsed.errors:
        outcome = ParseOutcome.malformed
    elif found:
        outcome = ParseOutcome.calls
    else:
        outcome = ParseOutcome.no_call
    return TurnParse(turn, parser, outcome, found, would, list(parsed.errors))


UNKNOWN_FAMILY = "unknown"
"""The family label of turns whose trace records no `tool_call_family` (gateway calls)."""

BACKEND_PARSER = "backend"
"""The parser label of a gateway call: the backend's own (its server's `--tool-call-parser`) read the
reply, not the farm."""


def classify_reply(
    turn: int, message: Mapping[str, Any], tools: list[dict[str, Any]] | None = None
) -> TurnParse:
    """The outcome of one model call answered through the gateway, from the reply the backend parsed
    (OpenAI chat `message`): `unparsed` when a known parser reads a call from the text the backend left
    as content (its parser never ran, or is not the model's: agentcore-rl-toolkit#97); the backend's
    malformed calls are not visible here."""
    content = message.get("content")
    text = content if isinstance(content, str) else ""
    found = len(message.get("tool_calls") or [])
    would = [
        name
        for name, fmt in FORMATS.items()
        if fmt.attempted(text) and parse_with(name, text, "", tools).tool_calls
    ]
    outcome = ParseOutcome.calls if found else ParseOutcome.no_call
    return TurnParse(turn, BACKEND_PARSER, ParseOutcome.unparsed if would else outcome, found, would)


def stats_key(family: str, parser: str, outcome: ParseOutcome | str) -> str:
    return f"{STATS_PREFIX}{family}|{parser}|{ParseOutcome(outcome).value}"


def counts(family: str, turns: Iterable[TurnParse]) -> dict[str, int]:
    """The farm:stats increments of one episode's turns."""
    out: dict[str, int] = {}
    for t in turns:
        key = stats_key(family, t.parser, t.outcome)
        out[key] = out.get(key, 0) + 1
    return out


@dataclass
class ParseTally:
    """Outcome counts of (family, parser) pairs, and the unparsed rate: turns whose calls were not read
    (`unparsed` + `malformed`) over turns that attempted a call (those and `calls`)."""

    outcomes: dict[tuple[str, str], dict[str, int]] = field(default_factory=dict)

    def add(self, family: str, parser: str, outcome: str, count: int = 1) -> None:
        row = self.outcomes.setdefault((family, parser), {o.value: 0 for o in ParseOutcome})
        row[outcome] = row.get(outcome, 0) + count

    @classmethod
    def from_stats(cls, stats: Mapping[str, float]) -> ParseTally:
        tally = cls()
        for key, value in stats.items():
            if key.startswith(STATS_PREFIX):
                parts = key.removeprefix(STATS_PREFIX).split("|")
                if len(parts) == 3 and parts[2] in ParseOutcome.__members__:
                    tally.add(parts[0], parts[1], parts[2], int(value))
        return tally

    @classmethod
    def from_traces(cls, metadatas: Iterable[Mapping[str, Any]]) -> ParseTally:
        """From traces' metadata (`tool_call_family`, `turn_parses`)."""
        tally = cls()
        for meta in metadatas:
            family = str(meta.get("tool_call_family") or UNKNOWN_FAMILY)
            for turn in meta.get("turn_parses") or []:
                if isinstance(turn, Mapping) and turn.get("outcome") in ParseOutcome.__members__:
                    tally.add(family, str(turn.get("parser") or "unknown"), str(turn["outcome"]))
        return tally

    def unparsed_rate(self, family: str, parser: str) -> float | None:
        row = self.outcomes.get((family, parser), {})
        missed = row.get("unparsed", 0) + row.get("malformed", 0)
        attempted = missed + row.get("calls", 0)
        return missed / attempted if attempted else None

    def rows(self) -> list[tuple[str, str, dict[str, int], float | None]]:
        """(family, parser, outcome counts, unparsed rate), sorted."""
        return [(f, p, dict(row), self.unparsed_rate(f, p)) for (f, p), row in sorted(self.outcomes.items())]
