"""Bounded output capture: keeps the head and the tail of a stream and counts what was dropped between."""

from __future__ import annotations


class OutputCapture:
    """Accumulates bytes but holds at most `limit` of them: the first half and the most recent half."""

    def __init__(self, limit: int) -> None:
        self.limit = max(limit, 2)
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        head_room = self.limit // 2 - len(self._head)
        if head_room > 0:
            self._head += data[:head_room]
            data = data[head_room:]
        if data:
            self._tail += data
            keep = self.limit - self.limit // 2
            if len(self._tail) > keep:
                del self._tail[: len(self._tail) - keep]

    @property
    def dropped(self) -> int:
        return self.total - len(self._head) - len(self._tail)

    def tail(self, n: int) -> bytes:
        """The last `n` bytes seen (or fewer, when fewer are held)."""
        joined = self._tail if len(self._tail) >= n else self._head + self._tail
        return bytes(joined[-n:])

    def text(self, strip_suffix: int = 0) -> str:
        """The captured output as text, with a note where bytes were dropped, minus `strip_suffix` bytes."""
        head, tail = bytes(self._head), bytes(self._tail)
        if strip_suffix:
            if len(tail) >= strip_suffix:
                tail = tail[: len(tail) - strip_suffix]
            else:
                head = head[: len(head) - (strip_suffix - len(tail))]
                tail = b""
        if not self.dropped:
            return (head + tail).decode("utf-8", "replace")
        note = f"\n[... output truncated: {self.dropped} bytes omitted ...]\n"
        return head.decode("utf-8", "replace") + note + tail.decode("utf-8", "replace")
