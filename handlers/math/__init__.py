"""The math handler and its sample suite (problems.jsonl; scripts/ for the scripted reference policy)."""

from handlers.math.handler import MathHandler, MathInstance

__all__ = ["MathHandler", "MathInstance"]
