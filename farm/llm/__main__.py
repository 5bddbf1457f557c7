"""`python -m farm.llm serve ...` (same as `farm llm serve ...`)."""

from farm.llm.cli import llm

llm(prog_name="python -m farm.llm")
