"""The scripted policy: deterministic, cheap, and right only with probability `accuracy`.

It decodes the prompt back into the conversation and acts by script (see scripts.py). The episode's fate
is drawn once, at the first step where the success and failure paths differ, and later turns follow the
branch that the earlier assistant turns took. Every token has probability 1 under the script except the
first token of that deciding turn, whose logprob is log(accuracy) or log(1 - accuracy).
"""

from __future__ import annotations

import ast
import json
import math
import random
import re
import threading
from dataclasses import dataclass
from typing import Any

from farm.chat.tokenizer import ChatTokenizer
from farm.llm.chatml import ParsedConversation
from farm.llm.policies.scripts import Script, ScriptBook, Step
from farm.llm.prompts import read_prompt
from farm.llm.sampling import Sample, SamplingRequest, StopChecker

CANNOT_SOLVE = "I cannot solve this problem."
SCRIPT_DONE = "I have no further steps to take."
_ARITHMETIC_CHUNK = re.compile(r"[\d\s.+\-*/%()]+")
_ARITHMETIC_NODES = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.operator, ast.unaryop)


@dataclass
class Turn:
    message: dict[str, Any]
    """The assistant message to emit."""
    decision_logprob: float | None = None
    """Set when this turn drew the episode's fate."""


class ScriptedPolicy:
    name = "scripted"

    def __init__(
        self, tokenizer: ChatTokenizer, scripts: ScriptBook, accuracy: float = 0.5, seed: int = 0
    ) -> None:
        if not 0.0 <= accuracy <= 1.0:
            raise ValueError("accuracy must be within [0, 1]")
        self.tokenizer = tokenizer
        self.scripts = scripts
        self.accuracy = accuracy
        self._rng = random.Random(seed)
        self._rng_lock = threading.Lock()

    def sample(self, prompt_ids: list[int], sampling: SamplingRequest) -> Sample:
        conversation = read_prompt(self.tokenizer, self.tokenizer.decode(prompt_ids))
        turn = self.next_turn(conversation, sampling.seed)
        text = self.tokenizer.assistant_text(turn.message)
        if conversation.open_text and text.startswith(conversation.open_text):
            text = text[len(conversation.open_text) :]  # the prompt already holds the start of the answer
        checker = StopChecker(self.tokenizer, sampling)
        for i, token_id in enumerate(self.tokenizer.encode(text)):
            logprob = turn.decision_logprob if i == 0 and turn.decision_logprob is not None else 0.0
            if checker.feed(token_id, logprob):
                return checker.sample
        return checker.finish_unterminated()

    def next_turn(self, conversation: ParsedConversation, seed: int | None) -> Turn:
        messages = conversation.messages
        question = _first_user_text(messages)
        offered = [str(tool.get("function", tool).get("name", "")) for tool in conversation.tools]
        script = self.scripts.find(_user_texts(messages), offered)
        if script is None:
            return self._generic(messages, question, seed)
        return self._scripted(script, messages, question, seed)

    def _scripted(
        self, script: Script, messages: list[dict[str, Any]], question: str, seed: int | None
    ) -> Turn:
        assistant_at = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
        step = len(assistant_at)
        split = script.divergence
        if split is None or step < split:
            return _step_turn(script.steps, step, messages, question)
        if step == split:
            success, logprob = self._draw(seed)
            return _step_turn(
                script.steps if success else script.wrong_steps, step, messages, question, logprob
            )
        taken = messages[assistant_at[split]]
        context = messages[: assistant_at[split]]
        if _same_action(taken, script.steps[split].render(_variables(context, question))):
            return _step_turn(script.steps, step, messages, question)
        if _same_action(taken, script.wrong_steps[split].render(_variables(context, question))):
            return _step_turn(script.wrong_steps, step, messages, question)
        success, logprob = self._draw(seed)  # the history followed neither path: decide now
        return _step_turn(script.steps if success else script.wrong_steps, step, messages, question, logprob)

    def _generic(self, messages: list[dict[str, Any]], question: str, seed: int | None) -> Turn:
        if messages and messages[-1]["role"] == "tool":
            output = _text(messages[-1]["content"]).strip()
            success, logprob = self._draw(seed)
            answer = output if success else wrong_answer(output)
            return Turn(_say(f"The answer is \\boxed{{{answer}}}."), logprob)
        expression = find_arithmetic(question)
        if expression is not None:
            call = {"name": "python", "arguments": {"code": f"print({expression})"}}
            return Turn(
                {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": call}]}
            )
        return Turn(_say(CANNOT_SOLVE))

    def _draw(self, seed: int | None) -> tuple[bool, float]:
        if seed is not None:
            roll = random.Random(seed).random()
        else:
            with self._rng_lock:
                roll = self._rng.random()
        success = roll < self.accuracy
        chance = self.accuracy if success else 1.0 - self.accuracy
        return success, math.log(chance) if chance > 0 else 0.0


def _step_turn(
    steps: list[Step], index: int, messages: list[dict[str, Any]], question: str, logprob: float | None = None
) -> Turn:
    if index >= len(steps):
        return Turn(_say(SCRIPT_DONE))
    return Turn(steps[index].render(_variables(messages, question)), logprob)


def _variables(messages: list[dict[str, Any]], question: str) -> dict[str, str]:
    tool_output = next((_text(m["content"]).strip() for m in reversed(messages) if m["role"] == "tool"), "")
    return {"tool_output": tool_output, "question": question}


def _same_action(taken: dict[str, Any], expected: dict[str, Any]) -> bool:
    """Whether an assistant turn from the history is what a step would have produced."""
    if _text(taken.get("content")).strip() != _text(expected.get("content")).strip():
        return False
    return _calls(taken) == _calls(expected)


def _calls(message: dict[str, Any]) -> list[tuple[str, Any]]:
    out = []
    for call in message.get("tool_calls") or []:
        fn = call.get("function", call)
        arguments = fn.get("arguments", {})
        out.append((fn["name"], json.loads(arguments) if isinstance(arguments, str) else arguments))
    return out


def _say(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def _text(content: Any) -> str:
    """Message content as text: harnesses send a string or a list of parts (text parts joined)."""
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _first_user_text(messages: list[dict[str, Any]]) -> str:
    return next((_text(m["content"]) for m in messages if m["role"] == "user"), "")


def _user_texts(messages: list[dict[str, Any]]) -> list[str]:
    return [_text(m["content"]) for m in messages if m["role"] == "user"]


def find_arithmetic(text: str) -> str | None:
    """The longest arithmetic expression in the text (two numbers and an operator at least), or None."""
    best: str | None = None
    for chunk in _ARITHMETIC_CHUNK.findall(text):
        candidate = _balanced(chunk.strip().rstrip("."))
        if candidate and (best is None or len(candidate) > len(best)):
            best = candidate
    return best


def _balanced(candidate: str) -> str | None:
    """Trim stray parentheses at the ends until the text parses as pure arithmetic."""
    while candidate:
        try:
            tree = ast.parse(candidate, mode="eval")
        except SyntaxError:
            tree = None
        if tree is not None:
            pure = all(isinstance(node, _ARITHMETIC_NODES) for node in ast.walk(tree))
            has_operator = any(isinstance(node, ast.BinOp) for node in ast.walk(tree))
            return candidate if pure and has_operator else None
        if candidate.startswith("(") and candidate.count("(") > candidate.count(")"):
            candidate = candidate[1:].strip()
        elif candidate.endswith(")") and candidate.count(")") > candidate.count("("):
            candidate = candidate[:-1].strip()
        else:
            return None
    return None


def wrong_answer(output: str) -> str:
    """An answer that is certainly not `output`: numbers are off by one, anything else is negated."""
    try:
        return str(int(output) + 1)
    except ValueError:
        pass
    try:
        return repr(float(output) + 1.0)
    except ValueError:
        return f"not {output}" if output else "unknown"
