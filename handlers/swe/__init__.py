"""The `swe` handler: SWE-bench-style issue resolution (bash + editor in a sandboxed checkout, the diff as
the artifact, scored by the instance's tests); its sample suite (repos/, built by suite.py) and scripts/
for the scripted reference policy."""

from handlers.swe.evaluation import evaluate_patch
from handlers.swe.handler import SweHandler
from handlers.swe.instance import SweInstance, SweTask
from handlers.swe.verdict import PatchVerdict

__all__ = ["PatchVerdict", "SweHandler", "SweInstance", "SweTask", "evaluate_patch"]
