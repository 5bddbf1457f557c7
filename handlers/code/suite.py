"""The `code` sample suite, written for this project: per problem a prompt, hidden tests, a reference
solution and a subtly wrong one (what the scripted policy writes on its failure path).

`kind` is how the scripted policy works the problem (see build_suite.py):
- `write`: create solution.py, run a quick check, finish;
- `fix`: create the wrong draft, run the public tests, repair it with `str_replace` (`edit`), rerun, finish;
- `complete`: view the starter file, fill it in with `str_replace` (`edit`), run a check, answer in text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Problem:
    slug: str
    prompt: str
    entry_point: str
    solution: str
    wrong: str
    hidden_tests: str
    check: str
    """The bash command the scripted policy runs after writing the solution."""
    public_tests: str | None = None
    starter_code: str | None = None
    kind: Literal["write", "fix", "complete"] = "write"
    edit: tuple[str, str] | None = None
    """(old, new) for str_replace: turns `wrong` into `solution` (fix) or the starter into it (complete)."""
    wrong_edit: tuple[str, str] | None = None
    """complete: (old, new) turning the starter into `wrong`."""


def _quick(entry: str, expression: str) -> str:
    return f'cd /workspace && python3 -c "from solution import {entry}; print({expression})"'


RUN_PUBLIC = "cd /workspace && python3 test_public.py"

PROBLEMS: list[Problem] = []

# --- run_length_encode -------------------------------------------------------------------------------
PROBLEMS.append(
    Problem(
        slug="run-length-encode",
        prompt=(
            "Write a function `run_length_encode(s: str) -> str` that compresses a string into runs.\n"
            "Each maximal run of one character becomes the run length followed by the character, so "
            '"aaabcc" becomes "3a1b2c". The empty string encodes to the empty string. Characters may be '
            "anything, digits and spaces included."
        ),
        entry_point="run_length_encode",
        solution="""def run_length_encode(s: str) -> str:
    if not s:
        return ""
    parts = []
    current, count = s[0], 1
    for ch in s[1:]:
        if ch == current:
            count += 1
        else:
            parts.append(f"{count}{current}")
            current, count = ch, 1
    parts.append(f"{count}{current}")
    return "".join(parts)
""",
        wrong="""def run_length_encode(s: str) -> str:
    parts = []
    count = 0
    for i, ch in enumerate(s):
        count += 1
        if i + 1 < len(s) and s[i + 1] != ch:
            parts.append(f"{count}{ch}")
            count = 0
    return "".join(parts)
""",
        hidden_tests="""from solution import run_length_encode


def test_example():
    assert run_length_encode("aaabcc") == "3a1b2c"


def test_empty():
    assert run_length_encode("") == ""


def test_single_character():
    assert run_length_encode("z") == "1z"


def test_long_run():
    assert run_length_encode("x" * 12) == "12x"


def test_digits_and_spaces():
    assert run_length_encode("11  2") == "212 12"


def test_alternating():
    assert run_length_encode("abab") == "1a1b1a1b"
""",
        check=_quick("run_length_encode", "run_length_encode('aaabcc')"),
    )
)

# --- is_balanced ---------------------------------------------------------------------------------------
PROBLEMS.append(
    Problem(
        slug="balanced-brackets",
        prompt=(
            "Write a function `is_balanced(text: str) -> bool` that tells whether the brackets in a string "
            "are balanced.\nThe bracket pairs are (), [] and {}; every other character is ignored. Brackets "
            "are balanced when each opening bracket is closed by one of its own kind, in the right order."
        ),
        entry_point="is_balanced",
        solution="""PAIRS = {")": "(", "]": "[", "}": "{"}


def is_balanced(text: str) -> bool:
    stack = []
    for ch in text:
        if ch in "([{":
            stack.append(ch)
        elif ch in PAIRS:
            if not stack or stack.pop() != PAIRS[ch]:
                return False
    return not stack
""",
        wrong="""def is_balanced(text: str) -> bool:
    for opening, closing in ("()", "[]", "{}"):
        depth = 0
        for ch in text:
            if ch == opening:
                depth += 1
            elif ch == closing:
                depth -= 1
                if depth < 0:
                    return False
        if depth != 0:
            return False
    return True
""",
        hidden_tests="""from solution import is_balanced


def test_empty_and_plain_text():
    assert is_balanced("") is True
    assert is_balanced("no brackets at all") is True


def test_nested():
    assert is_balanced("([]{})") is True
    assert is_balanced("{[()()]}") is True


def test_with_other_characters():
    assert is_balanced("a(b[c]d)e") is True


def test_crossed_pairs():
    assert is_balanced("([)]") is False
    assert is_balanced("{(})") is False


def test_unclosed_and_unopened():
    assert is_balanced("(((") is False
    assert is_balanced("}") is False
    assert is_balanced(")(") is False
""",
        check=_quick("is_balanced", "is_balanced('([]{})'), is_balanced('(()')"),
    )
)

# --- merge_intervals (fix) -----------------------------------------------------------------------------
_MERGE_WRONG = """def merge_intervals(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(intervals):
        if merged and start < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged
"""
_MERGE_EDIT = ("if merged and start < merged[-1][1]:", "if merged and start <= merged[-1][1]:")
PROBLEMS.append(
    Problem(
        slug="merge-intervals",
        prompt=(
            "Write a function `merge_intervals(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]` "
            "that merges overlapping closed intervals.\nThe input may be unsorted. Intervals that overlap or "
            "touch (one ends where the next starts) become one. Return the merged intervals as tuples, "
            "sorted by start."
        ),
        entry_point="merge_intervals",
        solution=_MERGE_WRONG.replace(*_MERGE_EDIT),
        wrong=_MERGE_WRONG,
        hidden_tests="""from solution import merge_intervals


def test_empty():
    assert merge_intervals([]) == []


def test_overlapping():
    assert merge_intervals([(1, 3), (2, 6), (8, 10)]) == [(1, 6), (8, 10)]


def test_touching_intervals_merge():
    assert merge_intervals([(1, 2), (2, 3)]) == [(1, 3)]
    assert merge_intervals([(-5, -1), (-1, 0)]) == [(-5, 0)]


def test_unsorted_input():
    assert merge_intervals([(5, 7), (1, 2)]) == [(1, 2), (5, 7)]


def test_contained_and_point():
    assert merge_intervals([(1, 10), (2, 3)]) == [(1, 10)]
    assert merge_intervals([(4, 4)]) == [(4, 4)]
""",
        public_tests="""from solution import merge_intervals


def test_overlap():
    assert merge_intervals([(1, 3), (2, 6)]) == [(1, 6)]


def test_touching():
    assert merge_intervals([(1, 2), (2, 5)]) == [(1, 5)]
""",
        check=RUN_PUBLIC,
        kind="fix",
        edit=_MERGE_EDIT,
    )
)

# --- roman_to_int --------------------------------------------------------------------------------------
PROBLEMS.append(
    Problem(
        slug="roman-to-int",
        prompt=(
            "Write a function `roman_to_int(numeral: str) -> int` that converts an uppercase Roman numeral "
            "(I, V, X, L, C, D, M) to an integer.\nSubtractive pairs (IV, IX, XL, XC, CD, CM) count as in "
            "standard notation; inputs are valid numerals from 1 to 3999."
        ),
        entry_point="roman_to_int",
        solution="""VALUES = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}


def roman_to_int(numeral: str) -> int:
    total = 0
    for i, ch in enumerate(numeral):
        value = VALUES[ch]
        if i + 1 < len(numeral) and VALUES[numeral[i + 1]] > value:
            total -= value
        else:
            total += value
    return total
""",
        wrong="""VALUES = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}


def roman_to_int(numeral: str) -> int:
    total = 0
    for i, ch in enumerate(numeral):
        value = VALUES[ch]
        if ch in "IX" and i + 1 < len(numeral) and VALUES[numeral[i + 1]] > value:
            total -= value
        else:
            total += value
    return total
""",
        hidden_tests="""from solution import roman_to_int


def test_small():
    assert roman_to_int("I") == 1
    assert roman_to_int("IV") == 4
    assert roman_to_int("IX") == 9


def test_additive():
    assert roman_to_int("LVIII") == 58


def test_tens():
    assert roman_to_int("XL") == 40


def test_hundreds():
    assert roman_to_int("CDXLIV") == 444
    assert roman_to_int("MCMXCIV") == 1994


def test_largest():
    assert roman_to_int("MMMCMXCIX") == 3999
""",
        check=_quick("roman_to_int", "roman_to_int('XIV'), roman_to_int('LVIII')"),
    )
)

# --- word_frequencies ----------------------------------------------------------------------------------
PROBLEMS.append(
    Problem(
        slug="word-frequencies",
        prompt=(
            "Write a function `word_frequencies(text: str) -> dict[str, int]` that counts words "
            "case-insensitively.\nA word is a maximal run of ASCII letters and apostrophes that contains at "
            "least one letter; everything else separates words. Keys are the lowercased words, values their "
            "counts. Text without words gives an empty dict."
        ),
        entry_point="word_frequencies",
        solution="""import re

_RUN = re.compile(r"[A-Za-z']+")


def word_frequencies(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for run in _RUN.findall(text):
        if not any(ch.isalpha() for ch in run):
            continue
        word = run.lower()
        counts[word] = counts.get(word, 0) + 1
    return counts
""",
        wrong="""import re

_RUN = re.compile(r"[a-z']+")


def word_frequencies(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for word in _RUN.findall(text.lower()):
        counts[word] = counts.get(word, 0) + 1
    return counts
""",
        hidden_tests="""from solution import word_frequencies


def test_case_insensitive():
    assert word_frequencies("Hello hello HELLO") == {"hello": 3}


def test_no_words():
    assert word_frequencies("") == {}
    assert word_frequencies("123 !!") == {}


def test_apostrophes_inside_words():
    assert word_frequencies("Don't stop, don't.") == {"don't": 2, "stop": 1}


def test_separators():
    assert word_frequencies("a-b a_b a1b") == {"a": 3, "b": 3}


def test_lone_apostrophes_are_not_words():
    assert word_frequencies("' '' x") == {"x": 1}
""",
        check=_quick("word_frequencies", "word_frequencies('The cat and the hat')"),
    )
)

# --- spiral_order --------------------------------------------------------------------------------------
PROBLEMS.append(
    Problem(
        slug="spiral-order",
        prompt=(
            "Write a function `spiral_order(matrix: list[list[int]]) -> list[int]` that returns the elements "
            "of a rectangular matrix in clockwise spiral order, starting at the top-left corner.\nThe matrix "
            "may be empty, a single row or a single column."
        ),
        entry_point="spiral_order",
        solution="""def spiral_order(matrix: list[list[int]]) -> list[int]:
    result: list[int] = []
    if not matrix or not matrix[0]:
        return result
    top, bottom, left, right = 0, len(matrix) - 1, 0, len(matrix[0]) - 1
    while top <= bottom and left <= right:
        for c in range(left, right + 1):
            result.append(matrix[top][c])
        for r in range(top + 1, bottom + 1):
            result.append(matrix[r][right])
        if top < bottom and left < right:
            for c in range(right - 1, left - 1, -1):
                result.append(matrix[bottom][c])
            for r in range(bottom - 1, top, -1):
                result.append(matrix[r][left])
        top, bottom, left, right = top + 1, bottom - 1, left + 1, right - 1
    return result
""",
        wrong="""def spiral_order(matrix: list[list[int]]) -> list[int]:
    result: list[int] = []
    if not matrix or not matrix[0]:
        return result
    top, bottom, left, right = 0, len(matrix) - 1, 0, len(matrix[0]) - 1
    while top <= bottom and left <= right:
        for c in range(left, right + 1):
            result.append(matrix[top][c])
        for r in range(top + 1, bottom + 1):
            result.append(matrix[r][right])
        for c in range(right - 1, left - 1, -1):
            result.append(matrix[bottom][c])
        for r in range(bottom - 1, top, -1):
            result.append(matrix[r][left])
        top, bottom, left, right = top + 1, bottom - 1, left + 1, right - 1
    return result
""",
        hidden_tests="""from solution import spiral_order


def test_empty():
    assert spiral_order([]) == []


def test_one_cell():
    assert spiral_order([[1]]) == [1]


def test_square():
    assert spiral_order([[1, 2, 3], [4, 5, 6], [7, 8, 9]]) == [1, 2, 3, 6, 9, 8, 7, 4, 5]


def test_wide():
    matrix = [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]]
    assert spiral_order(matrix) == [1, 2, 3, 4, 8, 12, 11, 10, 9, 5, 6, 7]


def test_tall():
    assert spiral_order([[1, 2], [3, 4], [5, 6], [7, 8]]) == [1, 2, 4, 6, 8, 7, 5, 3]


def test_single_row_and_column():
    assert spiral_order([[1, 2, 3]]) == [1, 2, 3]
    assert spiral_order([[1], [2], [3]]) == [1, 2, 3]
""",
        check=_quick("spiral_order", "spiral_order([[1, 2], [3, 4]])"),
    )
)

# --- flatten -------------------------------------------------------------------------------------------
PROBLEMS.append(
    Problem(
        slug="flatten",
        prompt=(
            "Write a function `flatten(nested: list) -> list` that flattens arbitrarily nested lists and "
            "tuples into one flat list, keeping left-to-right order.\nStrings, dicts and all other values "
            "are atoms (they are not taken apart), and empty lists or tuples vanish."
        ),
        entry_point="flatten",
        solution="""def flatten(nested: list) -> list:
    flat = []
    for item in nested:
        if isinstance(item, (list, tuple)):
            flat.extend(flatten(item))
        else:
            flat.append(item)
    return flat
""",
        wrong="""def flatten(nested: list) -> list:
    flat = []
    for item in nested:
        if isinstance(item, list):
            flat.extend(flatten(item))
        else:
            flat.append(item)
    return flat
""",
        hidden_tests="""from solution import flatten


def test_flat_stays_flat():
    assert flatten([1, 2, 3]) == [1, 2, 3]


def test_deep_lists():
    assert flatten([1, [2, [3, [4]]], 5]) == [1, 2, 3, 4, 5]


def test_tuples_are_flattened():
    assert flatten([1, (2, 3), [4, (5, [6])]]) == [1, 2, 3, 4, 5, 6]


def test_atoms():
    assert flatten(["ab", ["cd"], {"k": 1}]) == ["ab", "cd", {"k": 1}]


def test_empties_vanish():
    assert flatten([[], (), [[]], 7]) == [7]
    assert flatten([]) == []
""",
        check=_quick("flatten", "flatten([1, [2, [3]], 4])"),
    )
)

# --- longest_common_prefix -----------------------------------------------------------------------------
PROBLEMS.append(
    Problem(
        slug="longest-common-prefix",
        prompt=(
            "Write a function `longest_common_prefix(words: list[str]) -> str` that returns the longest "
            "string every word starts with.\nAn empty list has the empty prefix."
        ),
        entry_point="longest_common_prefix",
        solution="""def longest_common_prefix(words: list[str]) -> str:
    if not words:
        return ""
    prefix = words[0]
    for word in words[1:]:
        while not word.startswith(prefix):
            prefix = prefix[:-1]
    return prefix
""",
        wrong="""def longest_common_prefix(words: list[str]) -> str:
    if not words:
        return ""
    prefix = []
    for chars in zip(*words):
        if len(set(chars)) == 1:
            prefix.append(chars[0])
    return "".join(prefix)
""",
        hidden_tests="""from solution import longest_common_prefix


def test_empty_list():
    assert longest_common_prefix([]) == ""


def test_one_word():
    assert longest_common_prefix(["alone"]) == "alone"


def test_common_start():
    assert longest_common_prefix(["flower", "flow", "flight"]) == "fl"
    assert longest_common_prefix(["prefix", "pre"]) == "pre"


def test_stops_at_first_difference():
    assert longest_common_prefix(["abcd", "abxd"]) == "ab"
    assert longest_common_prefix(["xay", "xby"]) == "x"


def test_nothing_shared():
    assert longest_common_prefix(["dog", "cat"]) == ""
    assert longest_common_prefix(["", "a"]) == ""
""",
        check=_quick("longest_common_prefix", "longest_common_prefix(['flower', 'flow', 'flight'])"),
    )
)

# --- rotate_right --------------------------------------------------------------------------------------
PROBLEMS.append(
    Problem(
        slug="rotate-right",
        prompt=(
            "Write a function `rotate_right(items: list, k: int) -> list` that returns a new list rotated k "
            "places to the right.\nk may be zero, negative (a left rotation) or larger than the list. The "
            "input list must not be modified."
        ),
        entry_point="rotate_right",
        solution="""def rotate_right(items: list, k: int) -> list:
    if not items:
        return []
    k %= len(items)
    return items[-k:] + items[:-k] if k else list(items)
""",
        wrong="""def rotate_right(items: list, k: int) -> list:
    if not items:
        return []
    return items[-k:] + items[:-k]
""",
        hidden_tests="""from solution import rotate_right


def test_small_shift():
    assert rotate_right([1, 2, 3, 4, 5], 2) == [4, 5, 1, 2, 3]


def test_zero_and_full_turns():
    assert rotate_right([1, 2, 3], 0) == [1, 2, 3]
    assert rotate_right([1, 2, 3], 3) == [1, 2, 3]


def test_more_than_length():
    assert rotate_right([1, 2, 3, 4, 5], 7) == [4, 5, 1, 2, 3]


def test_negative_rotates_left():
    assert rotate_right([1, 2, 3, 4, 5], -1) == [2, 3, 4, 5, 1]
    assert rotate_right([1, 2, 3, 4, 5], -6) == [2, 3, 4, 5, 1]


def test_empty_and_input_untouched():
    assert rotate_right([], 3) == []
    items = [1, 2, 3]
    result = rotate_right(items, 1)
    assert items == [1, 2, 3] and result == [3, 1, 2] and result is not items
""",
        check=_quick("rotate_right", "rotate_right([1, 2, 3, 4, 5], 2)"),
    )
)

# --- to_base -------------------------------------------------------------------------------------------
PROBLEMS.append(
    Problem(
        slug="to-base",
        prompt=(
            "Write a function `to_base(n: int, base: int) -> str` that writes an integer in a base from 2 to "
            "36, with digits 0-9 then lowercase a-z.\nNegative numbers get a leading '-', zero is \"0\", and "
            "a base outside 2..36 raises ValueError."
        ),
        entry_point="to_base",
        solution="""DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def to_base(n: int, base: int) -> str:
    if not 2 <= base <= 36:
        raise ValueError(f"base must be within 2..36, not {base}")
    if n == 0:
        return "0"
    sign = "-" if n < 0 else ""
    n = abs(n)
    digits = []
    while n:
        n, remainder = divmod(n, base)
        digits.append(DIGITS[remainder])
    return sign + "".join(reversed(digits))
""",
        wrong="""DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def to_base(n: int, base: int) -> str:
    if not 2 <= base <= 36:
        raise ValueError(f"base must be within 2..36, not {base}")
    sign = "-" if n < 0 else ""
    n = abs(n)
    digits = []
    while n:
        n, remainder = divmod(n, base)
        digits.append(DIGITS[remainder])
    return sign + "".join(reversed(digits))
""",
        hidden_tests="""from solution import to_base


def _raises(base):
    try:
        to_base(10, base)
    except ValueError:
        return True
    return False


def test_hex_and_binary():
    assert to_base(255, 16) == "ff"
    assert to_base(5, 2) == "101"


def test_zero():
    assert to_base(0, 2) == "0"
    assert to_base(0, 36) == "0"


def test_negative():
    assert to_base(-10, 2) == "-1010"


def test_base_36_edges():
    assert to_base(35, 36) == "z"
    assert to_base(36, 36) == "10"


def test_large_and_round_trip():
    assert to_base(2**64, 16) == "1" + "0" * 16
    for n, base in [(123456789, 7), (-99, 3), (1, 2)]:
        assert int(to_base(n, base), base) == n


def test_bad_base():
    assert _raises(1) and _raises(37) and _raises(0)
""",
        check=_quick("to_base", "to_base(255, 16), to_base(-10, 2)"),
    )
)

# --- parse_duration ------------------------------------------------------------------------------------
PROBLEMS.append(
    Problem(
        slug="parse-duration",
        prompt=(
            'Write a function `parse_duration(text: str) -> int` that converts a duration such as "1h30m" '
            "into seconds.\nThe text is one or more <integer><unit> parts with units d, h, m and s (days, "
            "hours, minutes, seconds) in any order and without spaces. Anything else, the empty string "
            "included, raises ValueError."
        ),
        entry_point="parse_duration",
        solution="""import re

UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_PART = re.compile(r"([0-9]+)([dhms])")
_WHOLE = re.compile(r"(?:[0-9]+[dhms])+")


def parse_duration(text: str) -> int:
    if not _WHOLE.fullmatch(text):
        raise ValueError(f"not a duration: {text!r}")
    return sum(int(number) * UNITS[unit] for number, unit in _PART.findall(text))
""",
        wrong="""import re

UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_PART = re.compile(r"([0-9]+)([dhms])")
_WHOLE = re.compile(r"(?:[0-9]+[dhms])+")


def parse_duration(text: str) -> int:
    if not _WHOLE.match(text):
        raise ValueError(f"not a duration: {text!r}")
    return sum(int(number) * UNITS[unit] for number, unit in _PART.findall(text))
""",
        hidden_tests="""from solution import parse_duration


def _rejects(text):
    try:
        parse_duration(text)
    except ValueError:
        return True
    return False


def test_simple():
    assert parse_duration("1h30m") == 5400
    assert parse_duration("45s") == 45
    assert parse_duration("2d") == 172800


def test_all_units_any_order():
    assert parse_duration("1d2h3m4s") == 93784
    assert parse_duration("5s1h") == 3605


def test_rejects_empty_and_garbage():
    assert _rejects("")
    assert _rejects("h")
    assert _rejects("10x")


def test_rejects_trailing_junk():
    assert _rejects("1h30")
    assert _rejects("1h 30m")
    assert _rejects("2m!")
""",
        check=_quick("parse_duration", "parse_duration('1h30m')"),
    )
)

# --- caesar_shift --------------------------------------------------------------------------------------
PROBLEMS.append(
    Problem(
        slug="caesar-shift",
        prompt=(
            "Write a function `caesar_shift(text: str, shift: int) -> str` that shifts every ASCII letter by "
            "`shift` places in the alphabet, wrapping around.\nUppercase stays uppercase and lowercase stays "
            "lowercase; every other character (accented letters included) is unchanged. The shift may be "
            "negative or larger than 26."
        ),
        entry_point="caesar_shift",
        solution="""def caesar_shift(text: str, shift: int) -> str:
    out = []
    for ch in text:
        if "a" <= ch <= "z":
            out.append(chr((ord(ch) - 97 + shift) % 26 + 97))
        elif "A" <= ch <= "Z":
            out.append(chr((ord(ch) - 65 + shift) % 26 + 65))
        else:
            out.append(ch)
    return "".join(out)
""",
        wrong="""def caesar_shift(text: str, shift: int) -> str:
    out = []
    for ch in text:
        if ch.isalpha():
            base = 97 if ch.islower() else 65
            out.append(chr((ord(ch) - base + shift) % 26 + base))
        else:
            out.append(ch)
    return "".join(out)
""",
        hidden_tests="""from solution import caesar_shift


def test_basic():
    assert caesar_shift("abc", 1) == "bcd"
    assert caesar_shift("xyz", 3) == "abc"


def test_mixed_case_and_punctuation():
    assert caesar_shift("Hello, World!", 5) == "Mjqqt, Btwqi!"


def test_negative_and_large_shifts():
    assert caesar_shift("abc", -1) == "zab"
    assert caesar_shift("abc", 27) == "bcd"


def test_non_ascii_letters_unchanged():
    assert caesar_shift("café", 1) == "dbgé"
    assert caesar_shift("Straße", 2) == "Uvtcßg"


def test_round_trip():
    text = "The Quick Brown Fox, 42."
    assert caesar_shift(caesar_shift(text, 11), -11) == text
""",
        check=_quick("caesar_shift", "caesar_shift('Hello, World!', 5)"),
    )
)

# --- chunk ---------------------------------------------------------------------------------------------
PROBLEMS.append(
    Problem(
        slug="chunk",
        prompt=(
            "Write a function `chunk(items: list, size: int) -> list[list]` that splits a list into "
            "consecutive chunks of `size` items; the last chunk may be shorter.\nA size below 1 raises "
            "ValueError, and an empty list gives an empty list."
        ),
        entry_point="chunk",
        solution="""def chunk(items: list, size: int) -> list[list]:
    if size < 1:
        raise ValueError("size must be at least 1")
    return [items[i : i + size] for i in range(0, len(items), size)]
""",
        wrong="""def chunk(items: list, size: int) -> list[list]:
    if size < 1:
        raise ValueError("size must be at least 1")
    return [items[i : i + size] for i in range(0, len(items) - size + 1, size)]
""",
        hidden_tests="""from solution import chunk


def _rejects(size):
    try:
        chunk([1, 2], size)
    except ValueError:
        return True
    return False


def test_even_split():
    assert chunk([1, 2, 3, 4], 2) == [[1, 2], [3, 4]]
    assert chunk([1, 2, 3], 3) == [[1, 2, 3]]


def test_short_last_chunk():
    assert chunk([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]


def test_size_larger_than_list():
    assert chunk([1, 2], 5) == [[1, 2]]


def test_empty():
    assert chunk([], 3) == []


def test_bad_size():
    assert _rejects(0) and _rejects(-1)
""",
        check=_quick("chunk", "chunk([1, 2, 3, 4], 2)"),
    )
)

# --- is_valid_isbn10 -----------------------------------------------------------------------------------
PROBLEMS.append(
    Problem(
        slug="isbn10",
        prompt=(
            "Write a function `is_valid_isbn10(code: str) -> bool` that checks an ISBN-10.\nHyphens are "
            "ignored; what remains must be 9 digits and then a digit or an uppercase 'X' (worth 10), and the "
            "sum of each value times its weight (10 for the first character down to 1 for the last) must be "
            "divisible by 11."
        ),
        entry_point="is_valid_isbn10",
        solution="""DIGITS = "0123456789"


def is_valid_isbn10(code: str) -> bool:
    chars = code.replace("-", "")
    if len(chars) != 10:
        return False
    total = 0
    for i, ch in enumerate(chars):
        if ch in DIGITS:
            value = int(ch)
        elif ch == "X" and i == 9:
            value = 10
        else:
            return False
        total += value * (10 - i)
    return total % 11 == 0
""",
        wrong="""DIGITS = "0123456789"


def is_valid_isbn10(code: str) -> bool:
    chars = code.replace("-", "")
    if len(chars) != 10:
        return False
    total = 0
    for i, ch in enumerate(chars):
        if ch in DIGITS:
            value = int(ch)
        elif ch == "X":
            value = 10
        else:
            return False
        total += value * (10 - i)
    return total % 11 == 0
""",
        hidden_tests="""from solution import is_valid_isbn10


def test_valid():
    assert is_valid_isbn10("0-306-40615-2") is True
    assert is_valid_isbn10("0306406152") is True


def test_check_digit_x():
    assert is_valid_isbn10("3-598-21507-X") is True


def test_wrong_checksum():
    assert is_valid_isbn10("0-306-40615-3") is False


def test_x_only_at_the_end():
    assert is_valid_isbn10("X000000050") is False


def test_bad_lengths_and_characters():
    assert is_valid_isbn10("") is False
    assert is_valid_isbn10("030640615") is False
    assert is_valid_isbn10("03064061522") is False
    assert is_valid_isbn10("3-598-21507-x") is False
""",
        check=_quick("is_valid_isbn10", "is_valid_isbn10('0-306-40615-2')"),
    )
)

# --- pascal_row ----------------------------------------------------------------------------------------
PROBLEMS.append(
    Problem(
        slug="pascal-row",
        prompt=(
            "Write a function `pascal_row(n: int) -> list[int]` that returns row n (counting from 0) of "
            "Pascal's triangle.\nRow 0 is [1] and row 4 is [1, 4, 6, 4, 1]. The values must be exact ints "
            "even for large n; a negative n raises ValueError."
        ),
        entry_point="pascal_row",
        solution="""def pascal_row(n: int) -> list[int]:
    if n < 0:
        raise ValueError("n must not be negative")
    row = [1]
    for k in range(n):
        row.append(row[k] * (n - k) // (k + 1))
    return row
""",
        wrong="""def pascal_row(n: int) -> list[int]:
    if n < 0:
        raise ValueError("n must not be negative")
    row = [1]
    for k in range(n):
        row.append(int(row[k] * (n - k) / (k + 1)))
    return row
""",
        hidden_tests="""from math import comb

from solution import pascal_row


def test_first_rows():
    assert pascal_row(0) == [1]
    assert pascal_row(1) == [1, 1]
    assert pascal_row(4) == [1, 4, 6, 4, 1]


def test_row_sums():
    assert sum(pascal_row(10)) == 1024


def test_exact_for_large_n():
    for n in (60, 100):
        assert pascal_row(n) == [comb(n, k) for k in range(n + 1)]


def test_values_are_ints():
    assert all(type(v) is int for v in pascal_row(20))


def test_negative_raises():
    try:
        pascal_row(-1)
    except ValueError:
        return
    raise AssertionError("pascal_row(-1) did not raise ValueError")
""",
        check=_quick("pascal_row", "pascal_row(5)"),
    )
)

# --- dedupe --------------------------------------------------------------------------------------------
PROBLEMS.append(
    Problem(
        slug="dedupe",
        prompt=(
            "Write a function `dedupe(items: list) -> list` that removes repeated items, keeping the first "
            "occurrence of each in the original order.\nItems are hashable. The input list is not modified."
        ),
        entry_point="dedupe",
        solution="""def dedupe(items: list) -> list:
    return list(dict.fromkeys(items))
""",
        wrong="""def dedupe(items: list) -> list:
    return list(dict.fromkeys(reversed(items)))[::-1]
""",
        hidden_tests="""from solution import dedupe


def test_keeps_first_occurrence():
    assert dedupe([3, 1, 3, 2, 1]) == [3, 1, 2]
    assert dedupe(["a", "b", "a"]) == ["a", "b"]


def test_trivial():
    assert dedupe([]) == []
    assert dedupe([1, 1, 1]) == [1]


def test_tuples():
    assert dedupe([(1, 2), (2, 1), (1, 2)]) == [(1, 2), (2, 1)]


def test_input_untouched():
    items = [2, 2, 1]
    assert dedupe(items) == [2, 1] and items == [2, 2, 1]
""",
        check=_quick("dedupe", "dedupe([1, 2, 1, 3])"),
    )
)

# --- leftmost_index ------------------------------------------------------------------------------------
PROBLEMS.append(
    Problem(
        slug="leftmost-index",
        prompt=(
            "Write a function `leftmost_index(items: list[int], target: int) -> int` that returns the index "
            "of the first occurrence of target in a sorted list, or -1 when it is absent.\nThe list is "
            "sorted ascending, may hold duplicates and may be long: use binary search."
        ),
        entry_point="leftmost_index",
        solution="""def leftmost_index(items: list[int], target: int) -> int:
    lo, hi = 0, len(items)
    while lo < hi:
        mid = (lo + hi) // 2
        if items[mid] < target:
            lo = mid + 1
        else:
            hi = mid
    return lo if lo < len(items) and items[lo] == target else -1
""",
        wrong="""def leftmost_index(items: list[int], target: int) -> int:
    lo, hi = 0, len(items) - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        if items[mid] == target:
            return mid
        if items[mid] < target:
            lo = mid + 1
        else:
            hi = mid - 1
    return -1
""",
        hidden_tests="""from solution import leftmost_index


def test_unique_values():
    assert leftmost_index([1, 3, 5, 7], 5) == 2


def test_duplicates_give_the_first():
    assert leftmost_index([1, 2, 2, 2, 3], 2) == 1
    assert leftmost_index([5] * 10, 5) == 0


def test_absent():
    assert leftmost_index([], 1) == -1
    assert leftmost_index([2, 4], 3) == -1
    assert leftmost_index([2, 4], 1) == -1
    assert leftmost_index([2, 4], 9) == -1


def test_long_list():
    items = list(range(0, 2_000_000, 2))
    assert leftmost_index(items, 1_999_998) == 999_999
    assert leftmost_index(items, 1_999_999) == -1
""",
        check=_quick("leftmost_index", "leftmost_index([1, 2, 2, 3], 2)"),
    )
)

# --- wrap_text (fix) -----------------------------------------------------------------------------------
_WRAP_WRONG = """def wrap_text(text: str, width: int) -> list[str]:
    lines: list[str] = []
    current = ""
    for word in text.split():
        if not current:
            current = word
        elif len(current) + 1 + len(word) < width:
            current += " " + word
        else:
            lines.append(current)
            current = word
    if current:
        lines.append(current)
    return lines
"""
_WRAP_EDIT = ("len(current) + 1 + len(word) < width", "len(current) + 1 + len(word) <= width")
PROBLEMS.append(
    Problem(
        slug="wrap-text",
        prompt=(
            "Write a function `wrap_text(text: str, width: int) -> list[str]` that greedily wraps words into "
            "lines of at most `width` characters.\nWords are separated by any whitespace and joined by "
            "single spaces; each line takes as many words as fit. A word longer than width gets a line of "
            "its own. Text without words gives []."
        ),
        entry_point="wrap_text",
        solution=_WRAP_WRONG.replace(*_WRAP_EDIT),
        wrong=_WRAP_WRONG,
        hidden_tests="""from solution import wrap_text


def test_lines_may_be_exactly_width():
    assert wrap_text("the quick brown fox", 9) == ["the quick", "brown fox"]


def test_no_words():
    assert wrap_text("", 10) == []
    assert wrap_text("   ", 10) == []


def test_narrow():
    assert wrap_text("a b c", 1) == ["a", "b", "c"]
    assert wrap_text("a b c", 3) == ["a b", "c"]


def test_long_word_alone():
    assert wrap_text("supercalifragilistic is long", 5) == ["supercalifragilistic", "is", "long"]


def test_any_whitespace():
    assert wrap_text("one\\ttwo\\n three", 100) == ["one two three"]
""",
        public_tests="""from solution import wrap_text


def test_example():
    assert wrap_text("the quick brown fox", 9) == ["the quick", "brown fox"]
""",
        check=RUN_PUBLIC,
        kind="fix",
        edit=_WRAP_EDIT,
    )
)

# --- evaluate_rpn (fix) --------------------------------------------------------------------------------
_RPN_WRONG = """def evaluate_rpn(tokens: list[str]) -> int:
    stack: list[int] = []
    for token in tokens:
        if token in ("+", "-", "*", "/"):
            if len(stack) < 2:
                raise ValueError(f"too few operands for {token}")
            b, a = stack.pop(), stack.pop()
            if token == "+":
                stack.append(a + b)
            elif token == "-":
                stack.append(a - b)
            elif token == "*":
                stack.append(a * b)
            else:
                stack.append(a // b)
        else:
            try:
                stack.append(int(token))
            except ValueError:
                raise ValueError(f"unknown token {token!r}") from None
    if len(stack) != 1:
        raise ValueError("malformed expression")
    return stack[0]
"""
_RPN_EDIT = (
    "                stack.append(a // b)\n",
    "                quotient = abs(a) // abs(b)\n"
    "                stack.append(quotient if (a < 0) == (b < 0) else -quotient)\n",
)
PROBLEMS.append(
    Problem(
        slug="evaluate-rpn",
        prompt=(
            "Write a function `evaluate_rpn(tokens: list[str]) -> int` that evaluates an integer expression "
            "in reverse Polish notation.\nOperators are +, -, * and /; division truncates toward zero (so "
            '-7 / 2 is -3). Operands are integers, possibly negative ("-4"). A malformed expression (too few '
            "operands, operands left over, an unknown token) raises ValueError."
        ),
        entry_point="evaluate_rpn",
        solution=_RPN_WRONG.replace(*_RPN_EDIT),
        wrong=_RPN_WRONG,
        hidden_tests="""from solution import evaluate_rpn


def _rejects(tokens):
    try:
        evaluate_rpn(tokens)
    except ValueError:
        return True
    return False


def test_basic():
    assert evaluate_rpn(["2", "1", "+", "3", "*"]) == 9
    assert evaluate_rpn(["4", "13", "5", "/", "+"]) == 6
    assert evaluate_rpn(["3", "4", "-"]) == -1


def test_single_operand():
    assert evaluate_rpn(["42"]) == 42
    assert evaluate_rpn(["-4"]) == -4


def test_division_truncates_toward_zero():
    assert evaluate_rpn(["-7", "2", "/"]) == -3
    assert evaluate_rpn(["7", "-2", "/"]) == -3
    assert evaluate_rpn(["-7", "-2", "/"]) == 3


def test_malformed():
    assert _rejects([])
    assert _rejects(["1", "+"])
    assert _rejects(["1", "2"])
    assert _rejects(["1", "x", "+"])
""",
        public_tests="""from solution import evaluate_rpn


def test_example():
    assert evaluate_rpn(["2", "1", "+", "3", "*"]) == 9


def test_truncating_division():
    assert evaluate_rpn(["-7", "2", "/"]) == -3
""",
        check=RUN_PUBLIC,
        kind="fix",
        edit=_RPN_EDIT,
    )
)

# --- count_islands -------------------------------------------------------------------------------------
PROBLEMS.append(
    Problem(
        slug="count-islands",
        prompt=(
            "Write a function `count_islands(grid: list[str]) -> int` that counts the islands of a map drawn "
            "with '#' for land and '.' for water.\nLand cells belong to one island when they touch "
            "horizontally or vertically; diagonal contact does not connect. Rows all have the same length, "
            "the grid may be empty, and it may be large (avoid deep recursion)."
        ),
        entry_point="count_islands",
        solution="""def count_islands(grid: list[str]) -> int:
    seen: set[tuple[int, int]] = set()
    islands = 0
    for r, row in enumerate(grid):
        for c, cell in enumerate(row):
            if cell != "#" or (r, c) in seen:
                continue
            islands += 1
            seen.add((r, c))
            stack = [(r, c)]
            while stack:
                y, x = stack.pop()
                for ny, nx in ((y + 1, x), (y - 1, x), (y, x + 1), (y, x - 1)):
                    if 0 <= ny < len(grid) and 0 <= nx < len(grid[ny]) and grid[ny][nx] == "#":
                        if (ny, nx) not in seen:
                            seen.add((ny, nx))
                            stack.append((ny, nx))
    return islands
""",
        wrong="""def count_islands(grid: list[str]) -> int:
    seen: set[tuple[int, int]] = set()
    islands = 0
    for r, row in enumerate(grid):
        for c, cell in enumerate(row):
            if cell != "#" or (r, c) in seen:
                continue
            islands += 1
            seen.add((r, c))
            stack = [(r, c)]
            while stack:
                y, x = stack.pop()
                for dy in (-1, 0, 1):
                    for dx in (-1, 0, 1):
                        ny, nx = y + dy, x + dx
                        if 0 <= ny < len(grid) and 0 <= nx < len(grid[ny]) and grid[ny][nx] == "#":
                            if (ny, nx) not in seen:
                                seen.add((ny, nx))
                                stack.append((ny, nx))
    return islands
""",
        hidden_tests="""from solution import count_islands


def test_empty_and_water():
    assert count_islands([]) == 0
    assert count_islands(["...", "..."]) == 0


def test_single_cell():
    assert count_islands(["#"]) == 1


def test_diagonals_do_not_connect():
    assert count_islands(["#.", ".#"]) == 2
    board = ["".join("#" if (r + c) % 2 == 0 else "." for c in range(5)) for r in range(5)]
    assert count_islands(board) == 13


def test_shapes():
    assert count_islands(["##.", "#..", "..#"]) == 2
    assert count_islands(["#.#", "###", "#.#"]) == 1


def test_large_solid_grid():
    assert count_islands(["#" * 200] * 200) == 1
""",
        check=_quick("count_islands", "count_islands(['##.', '#..', '..#'])"),
    )
)

# --- next_permutation ----------------------------------------------------------------------------------
PROBLEMS.append(
    Problem(
        slug="next-permutation",
        prompt=(
            "Write a function `next_permutation(nums: list[int]) -> list[int]` that returns the next "
            "lexicographically greater arrangement of the numbers.\nWhen nums is already the greatest "
            "arrangement, return the smallest one (sorted ascending). Duplicates may occur. Return a new "
            "list and leave the input unchanged."
        ),
        entry_point="next_permutation",
        solution="""def next_permutation(nums: list[int]) -> list[int]:
    a = list(nums)
    i = len(a) - 2
    while i >= 0 and a[i] >= a[i + 1]:
        i -= 1
    if i < 0:
        return sorted(a)
    j = len(a) - 1
    while a[j] <= a[i]:
        j -= 1
    a[i], a[j] = a[j], a[i]
    a[i + 1 :] = reversed(a[i + 1 :])
    return a
""",
        wrong="""def next_permutation(nums: list[int]) -> list[int]:
    a = list(nums)
    i = len(a) - 2
    while i >= 0 and a[i] > a[i + 1]:
        i -= 1
    if i < 0:
        return sorted(a)
    j = len(a) - 1
    while j > i and a[j] <= a[i]:
        j -= 1
    a[i], a[j] = a[j], a[i]
    a[i + 1 :] = reversed(a[i + 1 :])
    return a
""",
        hidden_tests="""from solution import next_permutation


def test_distinct():
    assert next_permutation([1, 2, 3]) == [1, 3, 2]
    assert next_permutation([1, 3, 2]) == [2, 1, 3]


def test_wraps_around():
    assert next_permutation([3, 2, 1]) == [1, 2, 3]


def test_duplicates():
    assert next_permutation([1, 1, 5]) == [1, 5, 1]
    assert next_permutation([1, 5, 1]) == [5, 1, 1]
    assert next_permutation([5, 1, 1]) == [1, 1, 5]
    assert next_permutation([2, 2]) == [2, 2]


def test_tiny_inputs():
    assert next_permutation([]) == []
    assert next_permutation([7]) == [7]


def test_walks_every_arrangement_once():
    start = [1, 2, 2, 3]
    seen = [start]
    current = next_permutation(start)
    while current != start:
        assert current not in seen
        seen.append(current)
        current = next_permutation(current)
        assert len(seen) <= 12
    assert len(seen) == 12
    assert start == [1, 2, 2, 3]
""",
        check=_quick("next_permutation", "next_permutation([1, 2, 3])"),
    )
)

# --- top_k_frequent ------------------------------------------------------------------------------------
PROBLEMS.append(
    Problem(
        slug="top-k-frequent",
        prompt=(
            "Write a function `top_k_frequent(words: list[str], k: int) -> list[str]` that returns the k "
            "most frequent words, most frequent first.\nWords with equal counts are ordered alphabetically. "
            "With fewer than k distinct words, return them all."
        ),
        entry_point="top_k_frequent",
        solution="""def top_k_frequent(words: list[str], k: int) -> list[str]:
    counts: dict[str, int] = {}
    for word in words:
        counts[word] = counts.get(word, 0) + 1
    return sorted(counts, key=lambda word: (-counts[word], word))[:k]
""",
        wrong="""from collections import Counter


def top_k_frequent(words: list[str], k: int) -> list[str]:
    return [word for word, _ in Counter(words).most_common(k)]
""",
        hidden_tests="""from solution import top_k_frequent


def test_by_count():
    assert top_k_frequent(["b", "a", "b", "c", "a", "b"], 2) == ["b", "a"]


def test_ties_alphabetical():
    assert top_k_frequent(["pear", "apple", "pear", "apple", "fig"], 2) == ["apple", "pear"]
    assert top_k_frequent(["z", "y", "x"], 3) == ["x", "y", "z"]


def test_k_beyond_distinct():
    assert top_k_frequent(["a", "a", "b"], 10) == ["a", "b"]


def test_nothing():
    assert top_k_frequent([], 3) == []
    assert top_k_frequent(["a"], 0) == []
""",
        check=_quick("top_k_frequent", "top_k_frequent(['b', 'a', 'b'], 1)"),
    )
)

# --- MinStack ------------------------------------------------------------------------------------------
PROBLEMS.append(
    Problem(
        slug="min-stack",
        prompt=(
            "Write a class `MinStack` with methods push(value), pop() -> value, top() -> value and "
            "get_min() -> value, each in O(1) time.\nget_min returns the smallest value currently on the "
            "stack. pop, top and get_min on an empty stack raise IndexError."
        ),
        entry_point="MinStack",
        solution="""class MinStack:
    def __init__(self) -> None:
        self._items: list[tuple[object, object]] = []

    def push(self, value):
        smallest = value if not self._items or value < self._items[-1][1] else self._items[-1][1]
        self._items.append((value, smallest))

    def pop(self):
        if not self._items:
            raise IndexError("pop from an empty stack")
        return self._items.pop()[0]

    def top(self):
        if not self._items:
            raise IndexError("top of an empty stack")
        return self._items[-1][0]

    def get_min(self):
        if not self._items:
            raise IndexError("min of an empty stack")
        return self._items[-1][1]
""",
        wrong="""class MinStack:
    def __init__(self) -> None:
        self._items: list[object] = []
        self._min = None

    def push(self, value):
        self._items.append(value)
        if self._min is None or value < self._min:
            self._min = value

    def pop(self):
        if not self._items:
            raise IndexError("pop from an empty stack")
        value = self._items.pop()
        if not self._items:
            self._min = None
        return value

    def top(self):
        if not self._items:
            raise IndexError("top of an empty stack")
        return self._items[-1]

    def get_min(self):
        if not self._items:
            raise IndexError("min of an empty stack")
        return self._min
""",
        hidden_tests="""from solution import MinStack


def _raises(call):
    try:
        call()
    except IndexError:
        return True
    return False


def test_push_and_top():
    s = MinStack()
    s.push(5)
    s.push(7)
    assert s.top() == 7 and s.get_min() == 5


def test_min_restored_after_pop():
    s = MinStack()
    for value in (3, 1, 2):
        s.push(value)
    assert s.get_min() == 1
    assert s.pop() == 2
    assert s.pop() == 1
    assert s.get_min() == 3


def test_equal_minimums():
    s = MinStack()
    for value in (2, 2, 1, 1):
        s.push(value)
    s.pop()
    assert s.get_min() == 1
    s.pop()
    assert s.get_min() == 2


def test_empty_raises():
    s = MinStack()
    assert _raises(s.pop) and _raises(s.top) and _raises(s.get_min)
    s.push(1)
    s.pop()
    assert _raises(s.get_min)
""",
        check=(
            'cd /workspace && python3 -c "from solution import MinStack; s = MinStack(); s.push(2); '
            's.push(1); print(s.get_min(), s.pop(), s.get_min())"'
        ),
    )
)

# --- is_leap_year (fix) --------------------------------------------------------------------------------
_LEAP_WRONG = """def is_leap_year(year: int) -> bool:
    return year % 4 == 0 and year % 100 != 0
"""
_LEAP_EDIT = ("year % 100 != 0", "(year % 100 != 0 or year % 400 == 0)")
PROBLEMS.append(
    Problem(
        slug="leap-year",
        prompt=(
            "Write a function `is_leap_year(year: int) -> bool` for the proleptic Gregorian calendar.\n"
            "A year is a leap year when it is divisible by 4, except that years divisible by 100 are leap "
            "years only when they are also divisible by 400. Years may be zero or negative."
        ),
        entry_point="is_leap_year",
        solution=_LEAP_WRONG.replace(*_LEAP_EDIT),
        wrong=_LEAP_WRONG,
        hidden_tests="""from solution import is_leap_year


def test_ordinary_years():
    assert is_leap_year(2023) is False
    assert is_leap_year(2024) is True


def test_centuries():
    assert is_leap_year(1900) is False
    assert is_leap_year(2100) is False


def test_four_centuries():
    assert is_leap_year(2000) is True
    assert is_leap_year(2400) is True


def test_zero_and_negative():
    assert is_leap_year(0) is True
    assert is_leap_year(-4) is True
    assert is_leap_year(-100) is False
""",
        public_tests="""from solution import is_leap_year


def test_examples():
    assert is_leap_year(2024) is True
    assert is_leap_year(1900) is False
    assert is_leap_year(2000) is True
""",
        check=RUN_PUBLIC,
        kind="fix",
        edit=_LEAP_EDIT,
    )
)

# --- median (complete the starter) ---------------------------------------------------------------------
_MEDIAN_STARTER = '''def median(values: list[float]) -> float:
    """The middle value of the numbers, or the mean of the two middle ones for an even count."""
    raise NotImplementedError
'''
_MEDIAN_STUB = "    raise NotImplementedError\n"
_MEDIAN_BODY = """    if not values:
        raise ValueError("median of an empty list")
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[mid]
    return (ordered[mid - 1] + ordered[mid]) / 2
"""
_MEDIAN_WRONG_BODY = """    if not values:
        raise ValueError("median of an empty list")
    values.sort()
    mid = len(values) // 2
    if len(values) % 2:
        return values[mid]
    return (values[mid - 1] + values[mid]) / 2
"""
PROBLEMS.append(
    Problem(
        slug="median",
        prompt=(
            "Complete the function `median(values: list[float]) -> float` whose stub is in "
            "/workspace/solution.py.\nIt returns the middle value of the sorted numbers, or the mean of the "
            "two middle values for an even count. An empty list raises ValueError, and the input list must "
            "not be modified."
        ),
        entry_point="median",
        solution=_MEDIAN_STARTER.replace(_MEDIAN_STUB, _MEDIAN_BODY),
        wrong=_MEDIAN_STARTER.replace(_MEDIAN_STUB, _MEDIAN_WRONG_BODY),
        hidden_tests="""from solution import median


def test_odd_count():
    assert median([3, 1, 2]) == 2
    assert median([5]) == 5


def test_even_count():
    assert median([4, 1, 3, 2]) == 2.5
    assert median([1, 1]) == 1


def test_negative_and_float():
    assert median([-5, -1, -3]) == -3
    assert median([0.5, 0.25]) == 0.375


def test_input_untouched():
    values = [9, 1, 5]
    assert median(values) == 5
    assert values == [9, 1, 5]


def test_empty_raises():
    try:
        median([])
    except ValueError:
        return
    raise AssertionError("median([]) did not raise ValueError")
""",
        check=_quick("median", "median([4, 1, 3, 2])"),
        starter_code=_MEDIAN_STARTER,
        kind="complete",
        edit=(_MEDIAN_STUB, _MEDIAN_BODY),
        wrong_edit=(_MEDIAN_STUB, _MEDIAN_WRONG_BODY),
    )
)
