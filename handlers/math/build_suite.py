"""Writes the math sample suite (problems.jsonl) and the scripted policy's scripts for it.

Run `python -m handlers.math.build_suite` after changing the templates; the output is committed.
Every answer is computed here by running the same Python the scripted policy will send to its tool,
so the suite cannot disagree with itself.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from fractions import Fraction
from math import comb, factorial, gcd
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
SAY = "The computation gives {{ tool_output }}, so the answer is \\boxed{ {{- tool_output -}} }."


Problem = tuple[str, str]
"""(question, python code that sets `ans` to the answer)."""

Kind = tuple[Callable[[random.Random], dict[str, int]], str, str]
"""(draw the numbers, question template, code template): the templates' `{fields}` are the numbers."""

# In this order: each kind draws from the shared generator, so the order (and the order of the draws
# inside a kind) fixes the suite.
_KINDS: tuple[Kind, ...] = (
    (
        lambda r: {"a": r.randint(12, 99), "b": r.randint(12, 99), "c": r.randint(2, 500)},
        "What is {a} * {b} + {c}?",
        "ans = {a} * {b} + {c}",
    ),
    (
        lambda r: {"a": r.randint(2, 40) * 6, "b": r.randint(2, 40) * 4},
        "What is the greatest common divisor of {a} and {b}?",
        "from math import gcd\nans = gcd({a}, {b})",
    ),
    (
        lambda r: {"n": r.randint(6, 20), "k": r.randint(2, 5)},
        "In how many ways can {k} books be chosen from {n} different books?",
        "from math import comb\nans = comb({n}, {k})",
    ),
    (
        lambda r: {"n": r.randint(20, 400)},
        "What is the sum of all integers from 1 to {n}?",
        "ans = sum(range(1, {n} + 1))",
    ),
    (
        lambda r: {"a": r.randint(1, 9), "b": r.randint(2, 12), "c": r.randint(1, 9), "d": r.randint(2, 12)},
        "What is {a}/{b} + {c}/{d}, written as a reduced fraction?",
        "from fractions import Fraction\nans = Fraction({a}, {b}) + Fraction({c}, {d})",
    ),
    (  # roots r1 < r2: s = r1 + r2, p = r1 * r2
        lambda r: {"s": (r1 := r.randint(1, 15)) + (r2 := r.randint(16, 30)), "p": r1 * r2},
        "What is the larger root of x^2 - {s}x + {p} = 0?",
        "import math\nans = int(({s} + math.isqrt({s}**2 - 4*{p})) // 2)",
    ),
    (
        lambda r: {"a": r.randint(2, 30), "b": r.randint(5, 60), "m": r.randint(7, 97)},
        "What is the remainder when {a}^{b} is divided by {m}?",
        "ans = pow({a}, {b}, {m})",
    ),
    (
        lambda r: {"n": r.randint(20, 300)},
        "How many prime numbers are less than {n}?",
        "ans = sum(all(k % d for d in range(2, int(k**0.5) + 1)) for k in range(2, {n}))",
    ),
    (
        lambda r: {"n": (n := r.randint(7, 14)), "k": n - r.randint(2, 4)},
        "What is {n}! divided by {k}!?",
        "from math import factorial\nans = factorial({n}) // factorial({k})",
    ),
    (
        lambda r: {"n": r.randint(5, 40)},
        "What is the sum of the squares of the first {n} positive integers?",
        "ans = sum(i * i for i in range(1, {n} + 1))",
    ),
)


def _problems(rng: random.Random) -> list[Problem]:
    """Ten kinds, six of each."""
    problems = []
    for _ in range(6):
        for draw, question, code in _KINDS:
            numbers = draw(rng)
            problems.append((question.format(**numbers), code.format(**numbers)))
    return problems


def _evaluate(code: str) -> str:
    scope: dict[str, object] = {"Fraction": Fraction, "comb": comb, "factorial": factorial, "gcd": gcd}
    exec(code, scope)  # our own template code, not input
    return str(scope["ans"])


def build() -> tuple[list[dict[str, str]], list[dict[str, Any]]]:
    rng = random.Random(20261122)
    problems, scripts = [], []
    for i, (question, code) in enumerate(_problems(rng)):
        answer = _evaluate(code)
        wrong = _evaluate(code + "\nans = ans + 1")
        problems.append({"id": f"math-{i:03d}", "question": question, "answer": answer})
        scripts.append(
            {
                "match": question,
                "steps": [
                    {"tool": "python", "arguments": {"code": code + "\nprint(ans)"}},
                    {"say": SAY},
                ],
                "wrong_steps": [
                    {"tool": "python", "arguments": {"code": code + "\nprint(ans + 1)"}},
                    {"say": SAY},
                ],
            }
        )
        assert wrong != answer
    return problems, scripts


def main() -> None:
    problems, scripts = build()
    (HERE / "problems.jsonl").write_text("".join(json.dumps(p) + "\n" for p in problems))
    (HERE / "scripts" / "math.jsonl").write_text("".join(json.dumps(s) + "\n" for s in scripts))
    print(f"wrote {len(problems)} problems")


if __name__ == "__main__":
    main()
