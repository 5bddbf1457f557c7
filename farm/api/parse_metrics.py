"""/metrics families of the tool-call parse outcomes (farm/agent/parse_outcomes.py): turns per model
family, parser and outcome, and the unparsed rate per family and parser."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from farm.agent.parse_outcomes import ParseTally


def parse_outcome_families(stats: Mapping[str, float]) -> list[CounterMetricFamily | GaugeMetricFamily]:
    """`farm_tool_call_parse_outcomes{family,parser,outcome}` (assistant turns) and
    `farm_tool_call_unparsed_rate{family,parser}` ((unparsed + malformed) / turns that attempted a call;
    no sample until a turn attempted one)."""
    tally = ParseTally.from_stats(stats)
    outcomes = CounterMetricFamily(
        "farm_tool_call_parse_outcomes",
        "Assistant turns by model family, tool-call parser and parse outcome "
        "(calls, no_call, unparsed: another known parser reads a call this one did not, malformed)",
        labels=["family", "parser", "outcome"],
    )
    rate = GaugeMetricFamily(
        "farm_tool_call_unparsed_rate",
        "Turns whose tool calls were not read (unparsed or malformed) over turns that attempted a call",
        labels=["family", "parser"],
    )
    for family, parser, counts, unparsed in tally.rows():
        for outcome, count in sorted(counts.items()):
            outcomes.add_metric([family, parser, outcome], float(count))
        if unparsed is not None:
            rate.add_metric([family, parser], unparsed)
    return [outcomes, rate]
