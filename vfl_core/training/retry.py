"""Waiting between tries: the one retry policy of every loop that asks again (a party's
registration and heartbeats, the engine's alignment, the coordinator's evaluation).

A `Backoff` gives the pauses: a fixed one, or one that doubles up to a cap, optionally jittered
(so parties that lost the coordinator together do not all call back at once). `retry_until`
asks again until an answer is good or the time is up. The jitter uses Python's `random`, never a
training stream (vfl_core.seeding): waiting changes no result.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")


@dataclass
class Backoff:
    """Pauses of `first` seconds; with `cap`, each one twice the last up to `cap`; each scaled
    by a random factor in [1 - jitter, 1 + jitter]."""

    first: float
    cap: float | None = None  # None: every pause is `first`
    jitter: float = 0.0
    _planned: float = field(init=False)

    def __post_init__(self) -> None:
        self._planned = self.first

    @property
    def planned(self) -> float:
        """The next pause before jitter (to tell whether waiting it still fits a time limit)."""
        return self._planned

    def next(self) -> float:
        """The next pause, jittered; the one after grows up to the cap."""
        pause = self._planned
        if self.jitter:
            pause *= random.uniform(1 - self.jitter, 1 + self.jitter)
        if self.cap is not None:
            self._planned = min(self._planned * 2, self.cap)
        return pause

    def reset(self) -> None:
        """Back to the first pause (the last try succeeded)."""
        self._planned = self.first


def retry_until(
    attempt: Callable[[], T],
    failed: Callable[[T], bool],
    give_up_at: float,
    backoff: Backoff,
    on_retry: Callable[[T, float], None] | None = None,
) -> T:
    """`attempt()` until its answer is not `failed` or time.monotonic() passes `give_up_at`
    (a try started before it still runs); `on_retry(answer, pause)` before each pause. Returns
    the last answer."""
    answer = attempt()
    while failed(answer) and time.monotonic() < give_up_at:
        pause = backoff.next()
        if on_retry is not None:
            on_retry(answer, pause)
        time.sleep(pause)
        answer = attempt()
    return answer


def reconnect_backoff(cap: float) -> Backoff:
    """How a party calls an unreachable coordinator again: 0.2 s doubling up to `cap`, each
    pause within 20 % of that (parties cut off together spread their calls)."""
    return Backoff(0.2, cap=cap, jitter=0.2)
