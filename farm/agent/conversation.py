"""Token-faithful conversation state for the agent loop.

The context is the first prompt's ids followed by segments: tokens the policy sampled (loss mask 1,
their logprobs) and tokens the farm appended (tool results and template text, mask 0). Sampled ids
are never re-tokenized; only new messages are rendered and tokenized, as the canonical template text
that follows the end-of-turn token of the last assistant turn.
"""

from __future__ import annotations

from typing import Any

from farm.chat.tokenizer import ChatTokenizer
from farm.inference.generation import Generation
from farm.models.results import Trace


class TokenConversation:
    def __init__(
        self, tokenizer: ChatTokenizer, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> None:
        self.tokenizer = tokenizer
        self.tools = tools
        self.messages: list[dict[str, Any]] = list(messages)
        self.prompt_messages = list(messages)
        self.prompt_ids: list[int] = tokenizer.apply_chat_template(
            messages, tools=tools or None, add_generation_prompt=True
        )
        self.response_ids: list[int] = []
        self.loss_mask: list[int] = []
        self.logprobs: list[float] = []

    @property
    def context_ids(self) -> list[int]:
        return self.prompt_ids + self.response_ids

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)

    @property
    def sampled_tokens(self) -> int:
        return sum(self.loss_mask)

    def add_sampled(self, generation: Generation, message: dict[str, Any]) -> None:
        self.response_ids.extend(generation.token_ids)
        self.loss_mask.extend([1] * len(generation.token_ids))
        self.logprobs.extend(generation.logprobs)
        self.messages.append(message)

    def add_messages(self, new: list[dict[str, Any]]) -> None:
        """Append tool results / user feedback and the next generation prompt, masked. They are rendered
        and recorded as the template takes them (ChatTokenizer.template_messages): a template without a
        tool role (Gemma 3's) gets the results as a user turn."""
        new = self.tokenizer.template_messages(new)
        # A turn cut by max_tokens is closed as the template would close it (ChatTokenizer.ids_after_turn).
        last = self.response_ids[-1] if self.response_ids else None
        self._append_masked(self.tokenizer.ids_after_turn(last, new, self.tools or None))
        self.messages.extend(new)

    def _append_masked(self, ids: list[int]) -> None:
        self.response_ids.extend(ids)
        self.loss_mask.extend([0] * len(ids))
        self.logprobs.extend([0.0] * len(ids))

    def to_trace(self, finish_reason: str, metadata: dict[str, Any]) -> Trace:
        return Trace(
            prompt_ids=self.prompt_ids,
            response_ids=self.response_ids,
            loss_mask=self.loss_mask,
            response_logprobs=self.logprobs,
            prompt_messages=self.prompt_messages,
            response_messages=self.messages[len(self.prompt_messages) :],
            tools=self.tools,
            finish_reason=finish_reason,
            metadata=metadata,
        )
