"""The code handler and its sample suite (problems.jsonl, built by build_suite.py from suite.py;
scripts/ for the scripted reference policy)."""

from handlers.code.handler import CodeHandler
from handlers.code.instance import CodeInstance

__all__ = ["CodeHandler", "CodeInstance"]
