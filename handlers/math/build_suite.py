"""Writes the math sample suite (problems.jsonl) and the scripted policy's scripts for it.

Run `python -m handlers.math.build_suite` after changing the templates; the output is committed.
Every answer is computed here by running the same Python the scripted policy will send to its tool,
so the suite cannot disagree with itself.
"""

from __future__ import annotations

import json
import random
from fractions import Fraction
from math import comb, factorial, gcd
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
SAY = "The computation gives {{ tool_output }}, so the answer is \\boxed{ {{- tool_output -}} }."


Problem = tuple[str, str]
"""(question, python code that sets `ans` to the answer)."""


def _product_plus(rng: random.Random) -> Problem:
    a, b, c = rng.randint(12, 99), rng.randint(12, 99), rng.randint(2, 500)
    return f"What is {a} * {b} + {c}?", f"ans = {a} * {b} + {c}"


def _gcd(rng: random.Random) -> Problem:
    a, b = rng.randint(2, 40) * 6, rng.randint(2, 40) * 4
    return (
        f"What is the greatest common divisor of {a} and {b}?",
        f"from math import gcd\nans = gcd({a}, {b})",
    )


def _choose(rng: random.Random) -> Problem:
    n, k = rng.randint(6, 20), rng.randint(2, 5)
    return (
        f"In how many ways can {k} books be chosen from {n} different books?",
        f"from math import comb\nans = comb({n}, {k})",
    )


def _sum_to_n(rng: random.Random) -> Problem:
    n = rng.randint(20, 400)
    return f"What is the sum of all integers from 1 to {n}?", f"ans = sum(range(1, {n} + 1))"


def _fraction_sum(rng: random.Random) -> Problem:
    a, b, c, d = rng.randint(1, 9), rng.randint(2, 12), rng.randint(1, 9), rng.randint(2, 12)
    return (
        f"What is {a}/{b} + {c}/{d}, written as a reduced fraction?",
        f"from fractions import Fraction\nans = Fraction({a}, {b}) + Fraction({c}, {d})",
    )


def _larger_root(rng: random.Random) -> Problem:
    r1, r2 = rng.randint(1, 15), rng.randint(16, 30)
    return (
        f"What is the larger root of x^2 - {r1 + r2}x + {r1 * r2} = 0?",
        f"import math\nans = int(({r1 + r2} + math.isqrt({r1 + r2}**2 - 4*{r1 * r2})) // 2)",
    )


def _power_mod(rng: random.Random) -> Problem:
    a, b, m = rng.randint(2, 30), rng.randint(5, 60), rng.randint(7, 97)
    return f"What is the remainder when {a}^{b} is divided by {m}?", f"ans = pow({a}, {b}, {m})"


def _primes_count(rng: random.Random) -> Problem:
    n = rng.randint(20, 300)
    return (
        f"How many prime numbers are less than {n}?",
        f"ans = sum(all(k % d for d in range(2, int(k**0.5) + 1)) for k in range(2, {n}))",
    )


def _factorial_ratio(rng: random.Random) -> Problem:
    n = rng.randint(7, 14)
    k = n - rng.randint(2, 4)
    return (
        f"What is {n}! divided by {k}!?",
        f"from math import factorial\nans = factorial({n}) // factorial({k})",
    )


def _sum_of_squares(rng: random.Random) -> Problem:
    n = rng.randint(5, 40)
    return (
        f"What is the sum of the squares of the first {n} positive integers?",
        f"ans = sum(i * i for i in range(1, {n} + 1))",
    )


# In this order: each kind draws from the shared generator, so the order fixes the suite.
_KINDS = (
    _product_plus,
    _gcd,
    _choose,
    _sum_to_n,
    _fraction_sum,
    _larger_root,
    _power_mod,
    _primes_count,
    _factorial_ratio,
    _sum_of_squares,
)


def _problems(rng: random.Random) -> list[Problem]:
    """Ten kinds, six of each."""
    return [kind(rng) for _ in range(6) for kind in _KINDS]


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
