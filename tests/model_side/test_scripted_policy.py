"""The scripted policy: branch choice, consistency across turns, the generic behaviour, stopping."""

from __future__ import annotations

import contextlib
import io
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from farm.chat.tokenizer import ChatTokenizer
from farm.chat.tool_calls import parse_assistant
from farm.llm.policies.scripted import CANNOT_SOLVE, ScriptedPolicy, find_arithmetic, wrong_answer
from farm.llm.policies.scripts import Script, ScriptBook, handler_script_paths, load_scripts
from farm.llm.sampling import SamplingRequest, StopChecker
from tests.model_side.conftest import SCRIPTS

PYTHON_TOOL = {"type": "function", "function": {"name": "python", "parameters": {"type": "object"}}}


def _policy(tokenizer: ChatTokenizer, accuracy: float, seed: int = 0) -> ScriptedPolicy:
    book = ScriptBook(Script.model_validate(s) for s in SCRIPTS)
    return ScriptedPolicy(tokenizer, book, accuracy=accuracy, seed=seed)


def _run_episode(
    policy: ScriptedPolicy, question: str, seed: int | None
) -> tuple[list[dict], list[list[float]]]:
    """Drive the policy through tool turns, executing `print(<expr>)` calls by evaluating the expression."""
    tok = policy.tokenizer
    messages: list[dict] = [{"role": "user", "content": question}]
    logprobs = []
    for _ in range(4):
        ids = tok.apply_chat_template(messages, [PYTHON_TOOL])
        sample = policy.sample(ids, SamplingRequest(max_tokens=256, seed=seed))
        assert sample.finish_reason == "stop" and sample.token_ids[-1] == tok.eos_token_id
        logprobs.append(sample.logprobs)
        parsed = parse_assistant(sample.text)
        message = {"role": "assistant", "content": parsed.content}
        if not parsed.tool_calls:
            messages.append(message)
            break
        message["tool_calls"] = [
            {**c.to_openai(), "id": f"call_{i}"} for i, c in enumerate(parsed.tool_calls)
        ]
        messages.append(message)
        code = parsed.tool_calls[0].arguments["code"]
        messages.append({"role": "tool", "content": str(eval(code.removeprefix("print(")[:-1]))})
    return messages, logprobs


@pytest.mark.parametrize(("accuracy", "answer"), [(1.0, "7"), (0.0, "8")])
def test_script_follows_one_branch_to_the_end(tokenizer: ChatTokenizer, accuracy: float, answer: str) -> None:
    messages, logprobs = _run_episode(_policy(tokenizer, accuracy), "How many apples are there?", seed=None)
    assert messages[1]["content"] == "Let me count them."
    assert messages[-1]["content"] == f"There are {answer} apples, so the answer is \\boxed{{{answer}}}."
    assert logprobs[0][0] == 0.0  # certain branch: log(1)
    assert all(v == 0.0 for turn in logprobs for v in turn)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31))
def test_branch_is_reproducible_from_seed_and_consistent(tokenizer: ChatTokenizer, seed: int) -> None:
    policy = _policy(tokenizer, 0.5)
    first, logprobs = _run_episode(policy, "How many apples are there?", seed)
    again, _ = _run_episode(_policy(tokenizer, 0.5, seed=99), "How many apples are there?", seed)
    assert first == again
    code = first[1]["tool_calls"][0]["function"]["arguments"]
    success = "3 + 4" in code
    # The final answer matches the branch chosen at the first step.
    assert first[-1]["content"].endswith("\\boxed{7}." if success else "\\boxed{8}.")
    assert logprobs[0][0] == pytest.approx(math.log(0.5))
    assert logprobs[1] == [0.0] * len(logprobs[1])


def test_accuracy_sets_success_rate(tokenizer: ChatTokenizer) -> None:
    policy = _policy(tokenizer, 0.7, seed=3)
    wins = sum(
        _run_episode(policy, "How many apples?", None)[0][-1]["content"].endswith("{7}.") for _ in range(60)
    )
    assert 30 <= wins <= 54


def test_generic_behaviour_uses_python_then_boxes_the_output(tokenizer: ChatTokenizer) -> None:
    messages, _ = _run_episode(_policy(tokenizer, 1.0), "What is 12 * (3 + 4)?", seed=None)
    assert messages[1]["tool_calls"][0]["function"]["arguments"] == '{"code": "print(12 * (3 + 4))"}'
    assert messages[-1]["content"] == "The answer is \\boxed{84}."
    wrong, _ = _run_episode(_policy(tokenizer, 0.0), "What is 12 * (3 + 4)?", seed=None)
    assert wrong[-1]["content"] == "The answer is \\boxed{85}."


def test_generic_behaviour_without_arithmetic_gives_up(tokenizer: ChatTokenizer) -> None:
    messages, _ = _run_episode(_policy(tokenizer, 1.0), "Write me a poem.", seed=None)
    assert messages[-1]["content"] == CANNOT_SOLVE


def test_find_arithmetic_and_wrong_answer() -> None:
    assert find_arithmetic("What is 12 * (3 + 4)?") == "12 * (3 + 4)"
    assert find_arithmetic("Compute (2+3)*4.") == "(2+3)*4"
    assert find_arithmetic("What is 5?") is None
    assert find_arithmetic("I have 3 cats and 4 dogs") is None
    for output in ["12", "-3", "0.5", "3/4", "abc", ""]:
        assert wrong_answer(output) != output


def test_stop_checker_length_and_stop_strings(tokenizer: ChatTokenizer) -> None:
    ids = tokenizer.encode("alpha beta gamma delta<|im_end|>")
    checker = StopChecker(tokenizer, SamplingRequest(max_tokens=2))
    assert not checker.feed(ids[0], -0.1) and checker.feed(ids[1], -0.2)
    assert checker.sample.finish_reason == "length" and checker.sample.logprobs == [-0.1, -0.2]

    checker = StopChecker(tokenizer, SamplingRequest(max_tokens=50, stop=[" gamma"]))
    fed = 0
    while not checker.feed(ids[fed], 0.0):
        fed += 1
    assert checker.sample.finish_reason == "stop" and checker.sample.stop_reason == " gamma"
    assert checker.sample.text == "alpha beta"
    assert tokenizer.decode(checker.sample.token_ids) == "alpha beta gamma"

    checker = StopChecker(tokenizer, SamplingRequest(max_tokens=50))
    done = [checker.feed(t, 0.0) for t in ids]
    assert done[-1] and not any(done[:-1])
    # vLLM leaves a stop token's text out of `text` (it stays in token_ids): tests/emulation
    assert checker.sample.stop_reason is None and checker.sample.text == "alpha beta gamma delta"
    assert checker.sample.token_ids[-1] == tokenizer.eos_token_id


def test_scripts_reject_steps_that_do_nothing() -> None:
    with pytest.raises(ValueError):
        Script.model_validate({"match": "x", "steps": [{"arguments": {}}]})
    script = Script.model_validate(SCRIPTS[0])
    assert script.divergence == 0


def _exec_python(code: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(code, {})  # the scripts' own code, as the math handler's python tool would run it
    return out.getvalue()


def test_shipped_math_scripts_branch_into_right_and_wrong_answers(tokenizer: ChatTokenizer) -> None:
    paths = [p for p in handler_script_paths() if p.parent.parent.name == "math"]
    assert paths, "the math handler ships scripts"
    scripts = load_scripts(paths)
    answers = {}
    for accuracy in (1.0, 0.0):
        policy = ScriptedPolicy(tokenizer, ScriptBook(scripts), accuracy=accuracy)
        messages: list[dict] = [{"role": "user", "content": scripts[0].match}]
        for _ in range(len(scripts[0].steps)):
            sample = policy.sample(
                tokenizer.apply_chat_template(messages, [PYTHON_TOOL]), SamplingRequest(max_tokens=400)
            )
            parsed = parse_assistant(sample.text)
            message = {"role": "assistant", "content": parsed.content}
            if parsed.tool_calls:
                message["tool_calls"] = [c.to_openai() for c in parsed.tool_calls]
                messages += [
                    message,
                    {"role": "tool", "content": _exec_python(parsed.tool_calls[0].arguments["code"])},
                ]
            else:
                messages.append(message)
        answers[accuracy] = messages[-1]["content"]
    assert "\\boxed{" in answers[1.0] and answers[1.0] != answers[0.0]


def test_a_script_matches_any_user_message_and_only_when_its_tools_are_offered() -> None:
    generic = Script.model_validate({"match": "fix the bug", "steps": [{"say": "generic"}]})
    for_bash = Script.model_validate(
        {"match": "fix the bug", "tools": ["Bash"], "steps": [{"say": "claude"}]}
    )
    book = ScriptBook([generic, for_bash])
    # codex puts its own context first and the instruction in a later user message
    conversation = ["<environment_context>cwd=/work</environment_context>", "Please fix the bug in calc.py"]
    assert book.find(conversation, ["Bash", "Read"]) is for_bash
    assert book.find(conversation, ["shell"]) is generic
    assert book.find(["nothing relevant"], ["Bash"]) is None


@pytest.mark.parametrize(
    "source", ["mistral", "deepseek/system injected", "farm-tiny/arguments re-serialized"]
)
def test_the_policy_speaks_the_served_tokenizers_family(source: str) -> None:
    """Tool calls are emitted in the tokenizer's own format, read back by the family's parser, and the
    reference LLM's chat reply (farm/llm/formats.py) returns them as OpenAI tool_calls."""
    from farm.chat.families import family_named
    from farm.llm.formats import assistant_message
    from tests.templates.variants import family_tokenizer

    policy = _policy(family_tokenizer(source), accuracy=1.0)
    tok = policy.tokenizer
    messages: list[dict] = [{"role": "user", "content": "How many apples are in the basket?"}]
    ids = tok.apply_chat_template(messages, [PYTHON_TOOL])
    sample = policy.sample(ids, SamplingRequest(max_tokens=256, seed=1))
    marker = family_named(tok.family).call_marker
    assert marker is not None and marker in sample.text, sample.text
    parsed = tok.parse_assistant(sample.text)
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == [("python", {"code": "print(3 + 4)"})]
    reply, finish = assistant_message(tok, sample, parse_tools=True)
    assert finish == "tool_calls" and reply["tool_calls"][0]["function"]["name"] == "python"
    call = parsed.tool_calls[0]
    messages += [
        {"role": "assistant", "content": parsed.content, "tool_calls": [call.to_openai()]},
        {"role": "tool", "tool_call_id": call.id, "name": "python", "content": "7"},
    ]
    answer = policy.sample(tok.apply_chat_template(messages, [PYTHON_TOOL]), SamplingRequest(max_tokens=256))
    assert "\\boxed{7}" in tok.parse_assistant(answer.text).content


def test_a_step_can_reason_before_it_acts() -> None:
    from farm.llm.policies.scripts import Step
    from tests.templates.variants import family_tokenizer

    step = Step(think="It printed {{ tool_output }}.", say="So \\boxed{ {{- tool_output -}} }.")
    message = step.render({"tool_output": "7", "question": ""})
    assert message == {"role": "assistant", "content": "So \\boxed{7}.", "reasoning_content": "It printed 7."}
    tokenizer = family_tokenizer("deepseek/reasoning dropped")
    parsed = tokenizer.parse_assistant(tokenizer.assistant_text(message))
    assert (parsed.reasoning, parsed.content) == ("It printed 7.", "So \\boxed{7}.")
