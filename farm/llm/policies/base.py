"""The one interface every reference-server policy implements."""

from __future__ import annotations

from typing import Protocol

from farm.llm.sampling import Sample, SamplingRequest


class Policy(Protocol):
    name: str

    def sample(self, prompt_ids: list[int], sampling: SamplingRequest) -> Sample:
        """Continue `prompt_ids`; may block (CPU work), so the server calls it from a worker thread."""
        ...
