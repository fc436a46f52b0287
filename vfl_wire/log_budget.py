"""A budget for the log lines that peers can cause.

Every refused request is one warning line, and anyone who reaches a plaintext port can send
refused requests as fast as the link allows: a flood of malformed ones wrote about 160 lines a
second to the server's log, enough to fill a disk in days. `LineBudget` lets the first lines of
each kind through (a kind is a line's format string, which our code writes, never a peer) and
counts the rest; the next line of that kind that passes says how many were left out.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

LINES = 30  # of one kind per window
WINDOW_S = 10.0


@dataclass
class _Kind:
    since: float  # start of the current window
    passed: int = 0  # lines let through in it
    dropped: int = 0  # lines left out since the last one let through


class LineBudget(logging.Filter):
    """At most `lines` records of one kind per `window_s` seconds pass."""

    def __init__(
        self,
        lines: int = LINES,
        window_s: float = WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.lines, self.window_s, self._clock = lines, window_s, clock
        self._kinds: dict[str, _Kind] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        now = self._clock()
        with self._lock:
            kind = self._kinds.setdefault(str(record.msg), _Kind(now))
            if now - kind.since >= self.window_s:
                kind.since, kind.passed = now, 0
            if kind.passed >= self.lines:
                kind.dropped += 1
                return False
            kind.passed += 1
            dropped, kind.dropped = kind.dropped, 0
        if dropped:
            record.msg = f"{record.msg} ({dropped} more like it not logged before this one)"
        return True


def budget(logger: logging.Logger) -> logging.Logger:
    """`logger`, with a LineBudget (once, however often this is called)."""
    if not any(isinstance(f, LineBudget) for f in logger.filters):
        logger.addFilter(LineBudget())
    return logger
