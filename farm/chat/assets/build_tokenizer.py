"""Build the shipped `farm-tiny` tokenizer: a byte-level BPE trained on a corpus made on this machine.

    python farm/chat/assets/build_tokenizer.py [--out DIR] [--vocab-size 6144]

The corpus has four parts, all local and deterministic: English prose written for this project,
generated arithmetic and math word problems, Python source from the running interpreter's stdlib,
and ChatML conversations with tool calls rendered by the shipped chat template. No downloads.
The output directory loads offline with `transformers.AutoTokenizer.from_pretrained(DIR)`.
"""

from __future__ import annotations

import argparse
import json
import random
import sysconfig
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

HERE = Path(__file__).resolve().parent
TEMPLATE_PATH = HERE / "chat_template.jinja"
DEFAULT_OUT = HERE / "farm-tiny"

ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [ENDOFTEXT, IM_START, IM_END]
"""Control tokens: dropped by `skip_special_tokens`."""
MARKUP_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
"""Added (non-special) tokens: always one id each, and kept in decoded text like ordinary words."""

# GPT-2 style pre-tokenization, except that digits stand alone so numbers tokenize uniformly.
PRETOKENIZE_PATTERN = r"'(?:[sdmt]|ll|ve|re)| ?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"

PROSE = """\
A rollout farm takes work from a trainer and hands back trajectories. Each job starts a sandbox, lets an
agent act through tools for a number of turns, scores what the agent produced, and returns every token the
model sampled together with its log probability. The trainer never sees the sandboxes; it only posts work
and reads results.

Reinforcement learning for language agents needs many episodes per step. Some finish in a second, others
run for an hour. A pipeline with separate stages for setup, acting and scoring keeps the expensive parts
busy: while one episode waits for a slow test suite, another one is already talking to the model.

The agent loop is simple to state. Render the conversation, ask the model for the next message, look for
tool calls in it, run each tool in the sandbox, append the results, and repeat until the model answers
without calling a tool or the budget runs out. Errors are part of the data: a malformed call becomes a
message that tells the model what went wrong, so it can learn to avoid the mistake.

Token ids are the ground truth. Text is for people. If the farm decoded the model's answer and encoded it
again, the ids could change, and the trainer would compute gradients for tokens the model never chose.
So every sampled token is kept exactly as the server returned it, and only the new messages are encoded.

When a question asks for a number, the agent may write a short program, run it, and read the output.
The final answer goes in a box, like this: the answer is 42. A verifier compares the boxed value with
the reference and gives a reward of one for a match and zero otherwise.

Good engineering is mostly about small pieces with one job each. A module that renders prompts should not
know about queues; a queue should not know about prompts. Tests start real servers on free ports and talk
to them over real sockets, because the bugs that matter live at the boundaries between processes.

The weather was mild that morning, and the river ran quietly under the old stone bridge. Children walked
to school in pairs, talking about numbers, animals, and the games they would play after lunch. A baker
opened his shop, the smell of bread filled the street, and the day began like any other day.

Please read the file, fix the failing test, and explain what you changed. First list the directory to
see which files exist. Then open the module and search for the function named in the error message.
Edit only the lines that need to change, run the tests again, and report the result.

I cannot solve this problem with the information given. Could you tell me more about what you need?
Sure, here is a short summary. The code computes the total, rounds it, and prints the answer.
Let me check that with a quick calculation before I answer. The result of the command is shown below.
"""

WORDS = [
    "apple",
    "banana",
    "cherry",
    "river",
    "mountain",
    "teacher",
    "student",
    "number",
    "answer",
    "question",
    "program",
    "function",
    "value",
    "result",
    "error",
    "file",
    "directory",
    "test",
    "module",
    "class",
    "method",
    "string",
    "list",
    "dict",
    "tuple",
    "integer",
    "float",
    "sum",
    "product",
    "difference",
    "quotient",
    "remainder",
    "square",
    "root",
    "prime",
    "factor",
    "even",
    "odd",
    "total",
    "average",
    "count",
]


def prose_corpus() -> Iterator[str]:
    for paragraph in PROSE.split("\n\n"):
        yield paragraph.replace("\n", " ")


def math_corpus(rng: random.Random, n: int) -> Iterator[str]:
    ops = ["+", "-", "*", "/", "**", "%", "//"]
    for _ in range(n):
        a, b, c = rng.randint(0, 999), rng.randint(1, 99), rng.randint(1, 9)
        op1, op2 = rng.choice(ops[:3]), rng.choice(ops)
        expr = f"{a} {op1} {b}" if rng.random() < 0.5 else f"({a} {op1} {b}) {op2} {c}"
        value = eval(expr)  # generated arithmetic only
        word = rng.choice(WORDS)
        yield rng.choice(
            [
                f"What is {expr}?",
                f"Compute {expr} and put the answer in a box.",
                f"The answer is \\boxed{{{value}}}.",
                f"A box holds {a} {word}s. After {b} more arrive, how many are there? {a} + {b} = {a + b}.",
                f"print({expr})\n{value}",
                f"Solve for x: {c}x + {b} = {c * a + b}. So x = {a}.",
                f"The {word} costs ${a}.{b:02d}; {c} of them cost ${(a * 100 + b) * c / 100:.2f}.",
                f"$\\frac{{{a}}}{{{b}}} + {c} = {a / b + c:.4f}$",
            ]
        )


STDLIB_MODULES = [
    "textwrap.py", "fractions.py", "statistics.py", "heapq.py", "functools.py", "string.py",
    "shlex.py", "difflib.py", "csv.py", "calendar.py", "dataclasses.py", "pathlib.py", "bisect.py",
    "json/__init__.py", "json/decoder.py", "json/encoder.py", "collections/__init__.py", "enum.py",
    "argparse.py", "random.py", "glob.py", "fnmatch.py", "contextlib.py", "operator.py", "pprint.py",
]  # fmt: skip


def python_corpus() -> Iterator[str]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for name in STDLIB_MODULES:
        path = stdlib / name
        if path.is_file():
            yield path.read_text(encoding="utf-8", errors="replace")


def chat_corpus(rng: random.Random, n: int) -> Iterator[str]:
    """Conversations rendered with the shipped template, so its markup becomes cheap to encode."""
    from jinja2 import Environment

    env = Environment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x: json.dumps(x, ensure_ascii=False)
    template = env.from_string(TEMPLATE_PATH.read_text(encoding="utf-8"))
    python_tool = {
        "type": "function",
        "function": {
            "name": "python",
            "description": "Run Python code and return what it prints.",
            "parameters": {
                "type": "object",
                "properties": {"code": {"type": "string"}},
                "required": ["code"],
            },
        },
    }
    bash_tool = {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command in the sandbox.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
    for _ in range(n):
        a, b = rng.randint(2, 999), rng.randint(2, 99)
        expr = f"{a} * {b} + {rng.randint(0, 9)}"
        value = eval(expr)  # generated arithmetic only
        command = rng.choice(["ls -la", "cat README.md", "python -m pytest -q", "grep -rn TODO src/"])
        messages = [
            {"role": "system", "content": "You are a careful assistant. Use tools when they help."},
            {"role": "user", "content": f"What is {expr}?"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": "python", "arguments": {"code": f"print({expr})"}}}
            ]},
            {"role": "tool", "content": str(value)},
            {"role": "assistant", "content": f"The answer is \\boxed{{{value}}}."},
            {"role": "user", "content": "Now look at the repository."},
            {"role": "assistant", "content": "Let me look.", "tool_calls": [
                {"type": "function", "function": {"name": "bash", "arguments": {"command": command}}}
            ]},
            {"role": "tool", "content": "README.md\nsrc\ntests"},
            {"role": "assistant", "reasoning_content": "The listing shows three entries.",
             "content": "There are three entries."},
        ]  # fmt: skip
        yield template.render(messages=messages, tools=[python_tool, bash_tool], add_generation_prompt=False)


def corpus(seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    texts = list(prose_corpus()) * 20
    texts += list(math_corpus(rng, 20_000))
    texts += list(python_corpus())
    texts += list(chat_corpus(rng, 400))
    return texts


def build(out: Path, vocab_size: int, seed: int = 0) -> PreTrainedTokenizerFast:
    tokenizer = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS + MARKUP_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus(seed), trainer=trainer)
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in MARKUP_TOKENS])

    wrapped: PreTrainedTokenizerFast = cast(Any, PreTrainedTokenizerFast)(  # untyped in some releases
        tokenizer_object=tokenizer,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        bos_token=None,
        unk_token=None,
        additional_special_tokens=[IM_START],
        model_max_length=32768,
        clean_up_tokenization_spaces=False,
        chat_template=TEMPLATE_PATH.read_text(encoding="utf-8"),
    )
    out.mkdir(parents=True, exist_ok=True)
    wrapped.save_pretrained(str(out))
    # Older transformers (4.x) know neither the v5 class name nor the separate chat_template.jinja file.
    config_path = out / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config["chat_template"] = TEMPLATE_PATH.read_text(encoding="utf-8")
    config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    special_map = {"eos_token": IM_END, "pad_token": ENDOFTEXT, "additional_special_tokens": [IM_START]}
    (out / "special_tokens_map.json").write_text(json.dumps(special_map, indent=2) + "\n", encoding="utf-8")
    return wrapped


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--vocab-size", type=int, default=6144)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    tok = build(args.out, args.vocab_size, args.seed)
    print(f"wrote {args.out} (vocab {len(tok)})")


if __name__ == "__main__":
    main()
