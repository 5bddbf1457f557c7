"""The check every tokenizer passes before the farm runs a model with it: render probe conversations both
ways — as the farm builds a context (the first prompt, then each sampled turn followed by the masked ids
of the messages after it, `ChatTokenizer.ids_after_turn`) and as the chat template renders the whole
conversation — and refuse the tokenizer when they differ where the farm writes.

What must hold at every point where the model generates (a system prompt or none; a tool call, its
result, an answer, a user turn, parallel calls, a turn cut by max_tokens):
- the template renders the conversation the farm sends (Gemma 3's published template refuses a `tool`
  role: the farm sends results as it takes them, `ChatTokenizer.template_messages`);
- the template's rendering ends with exactly the ids the farm appended after the last sampled turn, and
  what comes before them ends that turn with a turn-end token (a missed turn end, an extra `<eos>`, a
  base conversation left in the continuation all break this);
- the model's generation config (where the directory has one) stops on the template's turn end.
Where the whole rendering equals the farm's context the template is `exact`; otherwise the difference is
in what the template rewrites of earlier turns (Qwen3 drops their reasoning, Mistral v3 moves its system
prompt and tool list to the last user turn), which the farm keeps as sampled and first rendered: noted,
not refused. A refusal names the tokenizer, its family and what is missing (`TemplateRefused`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from jinja2 import TemplateError

if TYPE_CHECKING:
    from farm.chat.tokenizer import ChatTokenizer

PROBE_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look a word up in the dictionary.",
            "parameters": {
                "type": "object",
                "properties": {"word": {"type": "string"}},
                "required": ["word"],
            },
        },
    }
]


def _call(call_id: str, word: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "lookup", "arguments": {"word": word}}}


def _result(call_id: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "name": "lookup", "content": text}


@dataclass
class Turn:
    """One sampled assistant turn and the messages the farm appends after it."""

    assistant: dict[str, Any]
    after: list[dict[str, Any]]
    cut: bool = False
    """Cut by max_tokens: sampled without its turn-end token (the farm closes it)."""


@dataclass
class Probe:
    name: str
    prompt: list[dict[str, Any]]
    turns: list[Turn]
    optional: bool = False
    """A conversation a template may refuse outright (Llama 3.1's takes one call per turn): skipped,
    noted, when the template refuses it from the start."""


PROBES: tuple[Probe, ...] = (
    Probe(
        "system prompt, a tool call and its result, an answer, a user turn, a cut turn",
        [
            {"role": "system", "content": "You answer in few words."},
            {"role": "user", "content": "What does alpha mean?"},
        ],
        [
            Turn(
                {"role": "assistant", "content": "", "tool_calls": [_call("call0001A", "alpha")]},
                [_result("call0001A", "The first letter.")],
            ),
            Turn(
                {"role": "assistant", "content": "The first letter."},
                [{"role": "user", "content": "And beta?"}],
            ),
            Turn(
                {"role": "assistant", "content": "", "tool_calls": [_call("call0002B", "beta")]},
                [_result("call0002B", "The second letter."), {"role": "user", "content": "[2 turn(s) left]"}],
            ),
            Turn(
                {"role": "assistant", "content": "The second letter, cut short"},
                [{"role": "user", "content": "Go on."}],
                cut=True,
            ),
            Turn({"role": "assistant", "content": "Done."}, []),
        ],
    ),
    Probe(
        "no system prompt, user and assistant turns",
        [{"role": "user", "content": "Say one word."}],
        [
            Turn({"role": "assistant", "content": "Word."}, [{"role": "user", "content": "Another."}]),
            Turn({"role": "assistant", "content": "Again."}, [{"role": "user", "content": "Stop."}]),
            Turn({"role": "assistant", "content": "Stopped."}, []),
        ],
    ),
    Probe(
        "two tool calls in one turn and their two results",
        [{"role": "user", "content": "Look up gamma and delta."}],
        [
            Turn(
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [_call("call0003C", "gamma"), _call("call0004D", "delta")],
                },
                [_result("call0003C", "The third letter."), _result("call0004D", "The fourth letter.")],
            ),
            Turn({"role": "assistant", "content": "Third and fourth."}, []),
        ],
        optional=True,
    ),
)


class TemplateRefused(ValueError):
    """The farm cannot render conversations as this tokenizer's chat template does."""


@dataclass
class RenderingCheck:
    exact: bool = True
    """Every generation point's context equals the template's rendering of the whole conversation."""
    notes: list[str] = field(default_factory=list)


_REFUSALS = (TemplateError, ValueError)


def family_label(tokenizer: ChatTokenizer) -> str:
    """The family as a reader knows it, with what the farm took from the template."""
    family = str(tokenizer.family)
    if family == "hermes" and len(tokenizer.encode("<|im_start|>")) != 1:
        family = "unrecognised (no control token of a family the farm knows; read as ChatML)"
    elif family == "hermes":
        family = "hermes (ChatML)"
    roles = "no tool role: results go as user turns" if tokenizer.tool_role != "tool" else "tool role"
    return f"family {family}, turn end {tokenizer.eot_token!r}, {roles}"


def check_rendering(tokenizer: ChatTokenizer, probes: Sequence[Probe] = PROBES) -> RenderingCheck:
    """Render each probe both ways; TemplateRefused (naming the family and what is missing) where the
    farm's context would differ from the template's."""
    check = RenderingCheck()
    problem = _turn_end_problem(tokenizer) or _generation_config_problem(tokenizer)
    for probe in probes:
        if problem is not None:
            break
        try:
            problem = _run(tokenizer, probe, check)
        except _Skip as skip:
            check.notes.append(str(skip))
    if problem is not None:
        raise TemplateRefused(
            f"tokenizer {tokenizer.name!r} ({family_label(tokenizer)}): the farm cannot render conversations "
            f"as its chat template does: {problem}. Refused rather than run on a context the model's "
            "template would not produce; give the model's own chat template and generation_config.json "
            "(README: Model families and tool-call parsers)."
        )
    return check


class _Skip(Exception):
    pass


def _turn_end_problem(tokenizer: ChatTokenizer) -> str | None:
    if tokenizer.closers:  # the next message's opening token ends the turn (GLM)
        return None
    anchor = [{"role": "user", "content": "."}]
    try:
        opening = tokenizer.render(anchor, add_generation_prompt=True)
        closed = tokenizer.render([*anchor, {"role": "assistant", "content": "Zebra"}])
    except _REFUSALS as exc:
        return f"the template refuses a user turn and an assistant turn ({exc})"
    if tokenizer.eot_token not in closed[len(opening) :]:
        return (
            f"the template closes an assistant turn with no special token, and not with the tokenizer's eos "
            f"{tokenizer.eot_token!r} either (it renders {closed[len(opening) :]!r}): where a sampled turn "
            "ends is unknown"
        )
    return None


def _generation_config_problem(tokenizer: ChatTokenizer) -> str | None:
    ends = tokenizer.generation_end_ids
    if ends and tokenizer.eos_token_id not in ends:
        return (
            f"the model's generation_config.json stops on ids {sorted(ends)}, not on the template's turn "
            f"end {tokenizer.eot_token!r} ({tokenizer.eos_token_id}): a server would generate past the end "
            "of a turn"
        )
    return None


def _run(tokenizer: ChatTokenizer, probe: Probe, check: RenderingCheck) -> str | None:
    try:
        return _render_both_ways(tokenizer, probe, check)
    except _SystemRefused as refused:  # the job's own prompt, refused loudly at its first render
        check.notes.append(f"the template refuses a system prompt ({refused}): a job that gives one fails")
        without = Probe(probe.name, probe.prompt[1:], probe.turns, probe.optional)
        return _run(tokenizer, without, check)
    except _Refusal as refusal:
        if probe.optional:  # the template's own limit (one call per turn): nothing the farm renders
            raise _Skip(f"the template refuses a conversation with {probe.name} ({refusal})") from refusal
        return str(refusal)


class _Refusal(Exception):
    pass


class _SystemRefused(Exception):
    pass


def _render_both_ways(tokenizer: ChatTokenizer, probe: Probe, check: RenderingCheck) -> str | None:
    tools = PROBE_TOOLS
    messages = list(probe.prompt)
    if tokenizer.system_prompt_moves and messages[0]["role"] == "system":
        messages = messages[1:]
        check.notes.append(
            "the request encoder moves the system prompt to the last user turn; the farm keeps it where the "
            "first prompt has it (not compared)"
        )
    try:
        context = tokenizer.apply_chat_template(messages, tools, add_generation_prompt=True)
    except _REFUSALS as exc:
        if messages[0]["role"] == "system":
            raise _SystemRefused(str(exc)) from exc
        raise _Refusal(
            f"the template refuses the first prompt of a conversation with {probe.name} ({exc})"
        ) from exc
    appended: list[int] = []
    said: list[str] = []
    for number, turn in enumerate(probe.turns, 1):
        where = f"in a conversation with {probe.name}, before assistant turn {number}"
        try:
            whole = tokenizer.apply_chat_template(messages, tools, add_generation_prompt=True)
        except _REFUSALS as exc:
            raise _Refusal(f"{where}, the template refuses the messages the farm sends ({exc})") from exc
        if number == 1 and whole != context:
            again = tokenizer.apply_chat_template(messages, tools, add_generation_prompt=True)
            if again != whole:  # a clock in the template: two renders of one conversation differ
                check.notes.append("the template renders a clock: compared where the farm appends")
                context = whole
        problem = _compare(tokenizer, context, appended, whole, number, said)
        if problem is not None:
            return f"{where}, {problem}"
        if whole != context and check.exact:
            check.exact = False
            check.notes.append(
                "the template renders an earlier turn otherwise than it was sampled or first rendered "
                f"({where}); the farm keeps what was sampled"
            )
        try:
            sampled = tokenizer.encode(tokenizer.assistant_text(turn.assistant))
        except _REFUSALS as exc:
            raise _Refusal(f"{where}, the template cannot render an assistant turn alone ({exc})") from exc
        if turn.cut:
            sampled = sampled[:-1]
        if not sampled:
            return f"{where}, an assistant turn renders to nothing"
        context = context + sampled
        messages.append(turn.assistant)
        if not turn.after:
            break
        new = tokenizer.template_messages(turn.after)
        said = [str(m["content"]) for m in turn.after]
        try:
            appended = tokenizer.ids_after_turn(sampled[-1], new, tools)
        except _REFUSALS as exc:
            raise _Refusal(f"{where}, the farm cannot render the messages after the turn ({exc})") from exc
        context = context + appended
        messages.extend(new)
    return None


def _compare(
    tokenizer: ChatTokenizer,
    context: list[int],
    appended: list[int],
    whole: list[int],
    turn: int,
    said: list[str],
) -> str | None:
    """None when `whole` (the template's rendering) agrees with the farm's `context` where the farm wrote:
    the same ids, or (a template that rewrites earlier turns) the same last appended ids, holding every
    message `said` after the last sampled turn, after a turn end."""
    if whole == context:
        return None
    if turn == 1:
        return _difference(tokenizer, context, whole, "the first prompt")
    if not appended or whole[len(whole) - len(appended) :] != appended:
        return _difference(tokenizer, context, whole, "what the farm appended after the last sampled turn")
    text = tokenizer.decode(appended)
    lost = [message for message in said if message.strip() not in text]
    if lost:
        return (
            f"what the farm appended after the last sampled turn ({text!r}) lacks the messages {lost!r}, "
            "which the template renders before it"
        )
    before = whole[: len(whole) - len(appended)]
    ends = tokenizer.turn_end_ids()
    if not (before and before[-1] in ends) and appended[0] not in ends:
        shown = tokenizer.decode(before[-8:])
        return (
            f"the template does not end the sampled turn with a turn-end token the farm knows "
            f"(it ends with {shown!r}; the farm's turn ends: {sorted(ends)})"
        )
    return None


def _difference(tokenizer: ChatTokenizer, farm: list[int], template: list[int], what: str) -> str:
    at = next(
        (i for i, (a, b) in enumerate(zip(farm, template, strict=False)) if a != b),
        min(len(farm), len(template)),
    )
    lo = max(0, at - 6)
    return (
        f"{what} differs from the template's rendering at token {at}: the farm has "
        f"{tokenizer.decode(farm[lo : at + 10])!r}, the template "
        f"{tokenizer.decode(template[lo : at + 10])!r} ({len(farm)} and {len(template)} tokens)"
    )
