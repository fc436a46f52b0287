"""Which serving parties are lagging, so that a frozen or overloaded party does not cost every
request the whole deadline (and, with many callers, hold a thread each that long).

A party is found lagging in one of two ways:

- it missed the last LAGGING_AFTER deadlines in a row (requests one after another: a caller
  alone sees a frozen party cost LAGGING_AFTER deadlines, then none);
- LAGGING_AFTER requests at once are waiting for it past the midpoint of their deadlines, and it
  has answered nothing since the first of them asked (many callers: the party went silent while
  requests piled up). Measured at 64 callers with a party SIGSTOPped, the first way alone let
  the 64 requests in flight at the freeze wait their whole deadline and then all reply at once
  (1.7-2.3% of a 3 s cell, its p99); this way releases them at half the deadline. A party that
  is slow but answering (each answer later than the midpoint, some answer arriving all the
  time) is not stalled by this rule: it answered since the requests asked.

A lagging party is asked by one request at a time (a probe, not every request piled on a
connection it does not read) and waited for by none, the requests already waiting for it
included (they stop waiting when it is found lagging); its first answer within a deadline
clears the mark, so the next requests wait for it again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass

from vfl_core.serving.peers import PeerAnswer

# A party that missed this many deadlines in a row, or that this many requests wait for past
# their deadlines' midpoints with no answer from it since they asked, is lagging.
LAGGING_AFTER = 3


@dataclass(frozen=True)
class _Ask:
    at: float  # time.monotonic() when asked
    midpoint: float  # halfway from then to the deadline
    deadline: float


class Lag:
    """The lagging marks of a gateway's parties, and the requests waiting for them."""

    def __init__(self) -> None:
        self._missed: dict[int, int] = {}
        self._probing: dict[int, float] = {}  # block -> the deadline of its probe out
        self._asks: dict[int, dict[Future[PeerAnswer], _Ask]] = {}  # block -> unanswered asks
        self._answered: dict[int, float] = {}  # block -> when it last answered
        self._waiters: set[Waiter] = set()  # the requests waiting for parties now
        self._lock = threading.Lock()

    def lagging(self, block: int) -> bool:
        with self._lock:
            return self._missed.get(block, 0) >= LAGGING_AFTER

    def ask(self, block: int, deadline: float) -> bool:
        """Whether this request asks `block`: always, unless it lags and a probe is out (one
        past its deadline is given up: a transport ends its calls there)."""
        with self._lock:
            if self._missed.get(block, 0) < LAGGING_AFTER:
                return True
            if self._probing.get(block, 0.0) > time.monotonic():
                return False
            self._probing[block] = deadline
            return True

    def watch(self, block: int, future: Future[PeerAnswer], deadline: float) -> None:
        """`future`: the party's answer to a request asked now, due by `deadline`."""
        now = time.monotonic()
        with self._lock:
            self._asks.setdefault(block, {})[future] = _Ask(now, (now + deadline) / 2, deadline)

        def answered(done: Future[PeerAnswer]) -> None:
            with self._lock:
                self._asks.get(block, {}).pop(done, None)
                self._probing.pop(block, None)
                if not done.cancelled() and done.exception() is None:
                    self._missed[block] = 0
                    self._answered[block] = time.monotonic()

        future.add_done_callback(answered)

    def missed(self, block: int) -> None:
        with self._lock:
            self._missed[block] = self._missed.get(block, 0) + 1
            lagging = self._missed[block] == LAGGING_AFTER
        if lagging:
            self._release(block)

    def wait(
        self, awaited: Mapping[int, Future[PeerAnswer]], midpoint: float, deadline: float
    ) -> None:
        """Until every awaited party answered, turned lagging meanwhile, or the deadline; at
        `midpoint` the parties still awaited are checked for a stall."""
        waiter = Waiter(set(awaited))
        with self._lock:
            self._waiters.add(waiter)
        try:
            for block, future in awaited.items():
                future.add_done_callback(lambda _, b=block: waiter.release(b))
            if not waiter.done.wait(max(0.0, midpoint - time.monotonic())):
                for block in waiter.left():
                    self._check_stall(block)
                waiter.done.wait(max(0.0, deadline - time.monotonic()))
        finally:
            with self._lock:
                self._waiters.discard(waiter)

    def _check_stall(self, block: int) -> None:
        """Lagging when LAGGING_AFTER live asks are past their midpoints, all asked after its
        last answer (asks past their deadlines are dropped: a transport ends them there)."""
        now = time.monotonic()
        with self._lock:
            asks = self._asks.get(block, {})
            for future in [f for f, a in asks.items() if a.deadline <= now]:
                del asks[future]
            since = self._answered.get(block, float("-inf"))
            stalled = sum(1 for a in asks.values() if a.midpoint <= now and a.at > since)
            found = stalled >= LAGGING_AFTER and self._missed.get(block, 0) < LAGGING_AFTER
            if found:
                self._missed[block] = LAGGING_AFTER
        if found:
            self._release(block)

    def _release(self, block: int) -> None:
        """Found lagging: the requests waiting for it stop waiting now."""
        with self._lock:
            waiters = list(self._waiters)
        for waiter in waiters:
            waiter.release(block)


class Waiter:
    """One request's wait: over when no party it waits for is left."""

    def __init__(self, blocks: set[int]) -> None:
        self._left = blocks
        self._lock = threading.Lock()
        self.done = threading.Event()
        if not blocks:
            self.done.set()

    def left(self) -> list[int]:
        with self._lock:
            return sorted(self._left)

    def release(self, block: int) -> None:
        with self._lock:
            self._left.discard(block)
            if not self._left:
                self.done.set()
