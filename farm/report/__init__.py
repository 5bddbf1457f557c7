"""`farm report`: look at a run (JobResult JSONL) as tables and plots."""

from farm.report.runs import Run, Span, load_run, spans
from farm.report.summary import RunSummary, StepReward, summarize

__all__ = ["Run", "RunSummary", "Span", "StepReward", "load_run", "spans", "summarize"]
