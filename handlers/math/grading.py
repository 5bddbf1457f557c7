"""Answer equivalence for math: symbolic/numeric comparison with math-verify (sympy underneath)."""

from __future__ import annotations

import logging
import re
import threading

from math_verify import parse, verify

logging.getLogger("math_verify").setLevel(logging.ERROR)

_BOXED = re.compile(r"\\boxed\s*\{")


def extract_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} in text, braces balanced; None when there is none."""
    starts = [m.end() for m in _BOXED.finditer(text)]
    if not starts:
        return None
    i = start = starts[-1]
    depth = 1
    while i < len(text):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start:i].strip()
        i += 1
    return None


def is_equivalent(prediction: str, reference: str) -> bool:
    """True when the policy's final answer means the reference answer (3/4 == 0.75 == \\frac{3}{4})."""
    # math-verify's own timeouts use SIGALRM, which only works on the main thread.
    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    boxed = extract_boxed(prediction)
    candidate = f"\\boxed{{{boxed}}}" if boxed is not None else prediction
    gold = parse(f"\\boxed{{{reference}}}", parsing_timeout=timeout)
    pred = parse(candidate, parsing_timeout=timeout)
    if not gold or not pred:
        return False
    return bool(verify(gold, pred, timeout_seconds=timeout))
