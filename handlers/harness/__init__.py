"""The `harness` handler: black-box agent harnesses behind the model gateway."""

from handlers.harness.adapters import ADAPTERS, HarnessInputs, HarnessPlan, adapter_names, get_adapter
from handlers.harness.evaluators import EVALUATORS, evaluator_names, get_evaluator, register_evaluator
from handlers.harness.handler import HarnessHandler
from handlers.harness.instance import HarnessInstance

__all__ = [
    "ADAPTERS",
    "EVALUATORS",
    "HarnessHandler",
    "HarnessInputs",
    "HarnessInstance",
    "HarnessPlan",
    "adapter_names",
    "evaluator_names",
    "get_adapter",
    "get_evaluator",
    "register_evaluator",
]
