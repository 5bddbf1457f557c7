"""What the policy sees of a `code` instance: the system prompt, the first user message and the starter
files of its workspace. The hidden tests appear in none of them."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from handlers.code.instance import CodeInstance

SOLUTION_PATH = "/workspace/solution.py"
PUBLIC_TESTS_FILE = "test_public.py"

SYSTEM_PROMPT = (
    "You are an expert Python programmer working in a Linux sandbox. Use the `editor` tool to view, create "
    "and edit files (`create` only makes new files; change existing ones with `str_replace`) and the "
    "`bash` tool to run commands; python3 is installed. Your solution goes in /workspace/solution.py. "
    "When it is ready, call the `finish` tool."
)

PUBLIC_TESTS_FOOTER = """

if __name__ == "__main__":
    import sys as _sys
    import traceback as _traceback

    _tests = [(_n, _f) for _n, _f in list(globals().items()) if _n.startswith("test") and callable(_f)]
    _failed = 0
    for _name, _test in _tests:
        try:
            _test()
        except Exception:
            _failed += 1
            print(f"FAIL {_name}")
            _traceback.print_exc(file=_sys.stdout)
        else:
            print(f"PASS {_name}")
    print(f"{len(_tests) - _failed}/{len(_tests)} passed")
    raise SystemExit(1 if _failed else 0)
"""


def user_message(inst: CodeInstance) -> str:
    """The task as the policy reads it: the prompt first (scripts match on it), then the ground rules."""
    where = f"Write your solution in `{SOLUTION_PATH}`"
    where += f"; it must define `{inst.entry_point}`." if inst.entry_point else "."
    if inst.starter_code is not None:
        where += " The file already holds starter code."
    parts = [
        inst.prompt.strip(),
        where + " After you finish, hidden tests import it from there (`from solution import ...`).",
    ]
    if inst.public_tests:
        parts.append(
            f"Example tests are in `/workspace/{PUBLIC_TESTS_FILE}`; run them with "
            f"`cd /workspace && python3 {PUBLIC_TESTS_FILE}`:\n```python\n{inst.public_tests.strip()}\n```"
        )
    return "\n\n".join(parts)


def starter_files(inst: CodeInstance) -> dict[str, str]:
    """Workspace-relative path → content, written into the run sandbox by init."""
    files: dict[str, str] = {}
    if inst.starter_code is not None:
        files["solution.py"] = inst.starter_code
    if inst.public_tests:
        files[PUBLIC_TESTS_FILE] = inst.public_tests.rstrip() + "\n" + PUBLIC_TESTS_FOOTER
    return files
