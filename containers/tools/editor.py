"""A str_replace file editor (view / create / str_replace / insert / undo_edit) with per-file undo history.

Errors are returned as `EditorOutput(error=True)` with a message the model can act on, never raised.
"""

from __future__ import annotations

import os
from pathlib import Path

COMMANDS = ("view", "create", "str_replace", "insert", "undo_edit")
SNIPPET_CONTEXT = 4
MAX_VIEW_CHARS = 32 * 1024


class EditorOutput:
    __slots__ = ("error", "output")

    def __init__(self, output: str, error: bool = False) -> None:
        self.output, self.error = output, error


class EditorError(Exception):
    pass


def numbered(text: str, first_line: int = 1) -> str:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return "\n".join(f"{n:6}\t{line}" for n, line in enumerate(lines, start=first_line))


class FileEditor:
    """Edits files under `root` (relative paths resolve against it); keeps the prior contents for undo."""

    def __init__(self, root: str = "/workspace") -> None:
        self.root = Path(root)
        self._history: dict[Path, list[str]] = {}

    def __call__(self, command: str, path: str, **args: object) -> EditorOutput:
        try:
            if command not in COMMANDS:
                raise EditorError(f"unknown command {command!r}; use one of {', '.join(COMMANDS)}")
            return EditorOutput(getattr(self, command)(self._resolve(path), **args))
        except EditorError as exc:
            return EditorOutput(str(exc), error=True)
        except TypeError as exc:
            return EditorOutput(f"bad arguments for {command}: {exc}", error=True)
        except OSError as exc:
            return EditorOutput(f"{exc.strerror or exc}: {path}", error=True)

    def _resolve(self, path: str) -> Path:
        if not path:
            raise EditorError("path is required")
        resolved = Path(path)
        return resolved if resolved.is_absolute() else self.root / resolved

    @staticmethod
    def _read(path: Path) -> str:
        if not path.exists():
            raise EditorError(f"{path} does not exist")
        if path.is_dir():
            raise EditorError(f"{path} is a directory")
        try:
            return path.read_text()
        except UnicodeDecodeError as exc:
            raise EditorError(f"{path} is not a UTF-8 text file") from exc

    def _write(self, path: Path, text: str, previous: str | None) -> None:
        path.write_text(text)
        if previous is not None:
            self._history.setdefault(path, []).append(previous)

    def view(self, path: Path, view_range: list[int] | None = None) -> str:
        if path.is_dir():
            if view_range:
                raise EditorError("view_range is not allowed when path is a directory")
            return self._list_dir(path)
        text = self._read(path)
        first = 1
        if view_range:
            lines = text.split("\n")
            if len(view_range) != 2:
                raise EditorError("view_range must be [start, end]")
            start, end = int(view_range[0]), int(view_range[1])
            if end == -1:
                end = len(lines)
            if not 1 <= start <= len(lines) or end < start:
                raise EditorError(f"invalid view_range {view_range}: the file has {len(lines)} lines")
            text, first = "\n".join(lines[start - 1 : end]), start
        body = numbered(text, first)
        if len(body) > MAX_VIEW_CHARS:
            body = body[:MAX_VIEW_CHARS] + "\n[... file truncated; use view_range to see the rest ...]"
        return f"Here's the result of running `cat -n` on {path}:\n{body}\n"

    @staticmethod
    def _list_dir(path: Path) -> str:
        entries = []
        for dirpath, dirnames, filenames in os.walk(path):
            depth = Path(dirpath).relative_to(path).parts
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            if len(depth) >= 2:
                dirnames[:] = []
            for name in dirnames:
                entries.append(str(Path(dirpath) / name) + "/")
            entries.extend(str(Path(dirpath) / f) for f in sorted(filenames) if not f.startswith("."))
        listing = "\n".join(sorted(entries))
        return f"Files and directories up to 2 levels deep in {path}, excluding hidden items:\n{listing}\n"

    def create(self, path: Path, file_text: str) -> str:
        if path.exists():
            raise EditorError(f"{path} already exists; use str_replace or insert to change it")
        if not path.parent.is_dir():
            raise EditorError(f"directory {path.parent} does not exist")
        self._write(path, file_text, None)
        return f"File created successfully at: {path}"

    def str_replace(self, path: Path, old_str: str, new_str: str = "") -> str:
        text = self._read(path)
        if not old_str:
            raise EditorError("old_str must not be empty")
        count = text.count(old_str)
        if count == 0:
            raise EditorError(f"No replacement was performed: old_str did not appear verbatim in {path}.")
        if count > 1:
            lines = [n for n, line in enumerate(text.split("\n"), start=1) if old_str.split("\n")[0] in line]
            raise EditorError(
                f"No replacement was performed: old_str appears {count} times in {path} "
                f"(lines {lines}); include more context to make it unique."
            )
        start = text.index(old_str)
        updated = text.replace(old_str, new_str, 1)
        self._write(path, updated, text)
        line = text[:start].count("\n") + 1
        return f"The file {path} has been edited. {self._snippet(updated, line, new_str)}"

    def insert(self, path: Path, insert_line: int, new_str: str) -> str:
        text = self._read(path)
        lines = text.split("\n")
        has_final_newline = text.endswith("\n")
        if has_final_newline:
            lines.pop()
        insert_line = int(insert_line)
        if not 0 <= insert_line <= len(lines):
            raise EditorError(f"invalid insert_line {insert_line}: it must be within [0, {len(lines)}]")
        new_lines = new_str.split("\n")
        if new_str.endswith("\n"):
            new_lines.pop()
        merged = lines[:insert_line] + new_lines + lines[insert_line:]
        updated = "\n".join(merged) + ("\n" if has_final_newline or not text else "")
        self._write(path, updated, text)
        return f"The file {path} has been edited. {self._snippet(updated, insert_line + 1, new_str)}"

    def undo_edit(self, path: Path) -> str:
        history = self._history.get(path)
        if not history:
            raise EditorError(f"No edit history found for {path}")
        path.write_text(history.pop())
        return f"Last edit to {path} undone successfully. {self._snippet(path.read_text(), 1, '')}"

    @staticmethod
    def _snippet(text: str, line: int, inserted: str) -> str:
        lines = text.split("\n")
        start = max(1, line - SNIPPET_CONTEXT)
        end = min(len(lines), line + inserted.count("\n") + SNIPPET_CONTEXT)
        body = numbered("\n".join(lines[start - 1 : end]), start)
        return f"Here's a snippet of the edited file:\n{body}\nReview the changes and edit again if needed."
