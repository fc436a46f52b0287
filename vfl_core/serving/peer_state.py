"""What the gateway knows of each other serving party now: when it last answered, its last
failure, whether it is lagging; and so why it is missing from an answer.

A party's answer that did not come is named by what the gateway knows of it, not only by the
request's own wait: "lagging" when the gateway did not wait for it (vfl_core.serving.lag found
it lagging), "down" when its last outcome was a refused or lost connection (a killed party:
its calls fail at once, but a request can also end before its call does, and that is no sign
the party came back), else "timed out". The same states fill the readiness body and the metrics.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass

from vfl_core.serving.peers import DOWN, LAGGING, TIMED_OUT, PeerAnswer, PeerFailure

UP = "up"
UNKNOWN = "unknown"  # never asked yet
STATES = (UP, DOWN, TIMED_OUT, LAGGING, UNKNOWN)


@dataclass
class _Peer:
    name: str
    answered: float | None = None  # time.monotonic() of its last answer
    failed: float | None = None  # of its last failure
    failure: str = ""  # its last failure's reason


class PeerStates:
    """The states of a gateway's peers (block -> name)."""

    def __init__(self, names: Mapping[int, str]) -> None:
        self._peers = {b: _Peer(n) for b, n in names.items()}
        self._lock = threading.Lock()

    def watch(self, block: int, future: Future[PeerAnswer]) -> None:
        """Record the outcome of a call to `block` when it completes."""

        def done(f: Future[PeerAnswer]) -> None:
            err = None if f.cancelled() else f.exception()
            with self._lock:
                peer = self._peers[block]
                if err is None:
                    peer.answered = time.monotonic()
                else:
                    peer.failed = time.monotonic()
                    peer.failure = err.reason if isinstance(err, PeerFailure) else str(err)

        future.add_done_callback(done)

    def why_missing(self, block: int, lagging: bool) -> str:
        """Why `block` gave a request no answer in time: DOWN (its last call's connection
        was refused or lost, and it has not answered since: also when it was found lagging
        before, as a party frozen under load and then killed is), else LAGGING or TIMED_OUT."""
        with self._lock:
            peer = self._peers[block]
            down = peer.failure == DOWN and (peer.answered or -1.0) < (peer.failed or -1.0)
        return DOWN if down else LAGGING if lagging else TIMED_OUT

    def answered_since(self, block: int, since: float) -> bool:
        """Whether `block` answered any request after `since` (time.monotonic()): alive."""
        with self._lock:
            answered = self._peers[block].answered
        return answered is not None and answered > since

    def state(self, block: int, lagging: bool) -> str:
        """UP, DOWN, TIMED_OUT, LAGGING or UNKNOWN: its last outcome (DOWN before LAGGING,
        as in why_missing)."""
        with self._lock:
            peer = self._peers[block]
            if peer.answered is None and peer.failed is None:
                return LAGGING if lagging else UNKNOWN
            if peer.failed is None or (peer.answered or -1.0) > peer.failed:
                return LAGGING if lagging else UP
            if peer.failure == DOWN:
                return DOWN
            return LAGGING if lagging else TIMED_OUT

    def describe(self, block: int, lagging: bool) -> dict[str, object]:
        """The readiness body's entry of one peer."""
        now = time.monotonic()
        with self._lock:
            peer = self._peers[block]
            answered, failure = peer.answered, peer.failure
        out: dict[str, object] = {"block": block, "state": self.state(block, lagging)}
        if answered is not None:
            out["last_answer_s_ago"] = round(now - answered, 3)
        if failure:
            out["last_failure"] = failure
        return out

    def names(self) -> dict[int, str]:
        return {b: p.name for b, p in self._peers.items()}
