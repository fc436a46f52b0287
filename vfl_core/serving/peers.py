"""What a gateway asks of another serving party, whatever the transport: the embeddings of the
keyed IDs it holds, by a deadline. The gRPC peer (vfl_client.serving_peers) and the in-process
one here answer a `PeerPort`; `BatchingPeer` merges the requests of concurrent callers that
arrive within a small window into one call (one long-lived thread per peer, never one per
request)."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol

import numpy as np

log = logging.getLogger(__name__)

# Why a party's embedding is missing from an answer (the reply names one per missing party).
TIMED_OUT = "timed out"
DOWN = "down"
NOT_HELD = "does not hold the ID"
# not waited for: it missed its recent deadlines (vfl_core.serving.lag); asked by a probe only
LAGGING = "lagging"

DEFAULT_WINDOW_S = 0.002
DEFAULT_MAX_BATCH = 1024  # keys in one merged call


@dataclass(frozen=True)
class PeerAnswer:
    """A party's answer for a list of keys."""

    held: np.ndarray  # (n,) bool: which keys the party holds
    embeddings: np.ndarray  # (held, d) float32, the held keys' embeddings in order


class PeerFailure(Exception):
    """A party gave no answer; `reason` says why (TIMED_OUT, DOWN, or its refusal)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class PeerPort(Protocol):
    """Another serving party, as the gateway sees it."""

    name: str
    block: int

    def embed(self, keys: Sequence[bytes], deadline: float) -> Future[PeerAnswer]:
        """Its embeddings of `keys`, asked to answer before `deadline` (time.monotonic()); the
        future fails with PeerFailure when it cannot."""
        ...


class LocalPeer:
    """A party in this process (tests, the in-process benchmark): answers at once."""

    def __init__(
        self, name: str, block: int, answer: Callable[[Sequence[bytes]], PeerAnswer]
    ) -> None:
        self.name = name
        self.block = block
        self._answer = answer

    def embed(self, keys: Sequence[bytes], deadline: float) -> Future[PeerAnswer]:
        future: Future[PeerAnswer] = Future()
        try:
            future.set_result(self._answer(keys))
        except PeerFailure as err:
            future.set_exception(err)
        return future


@dataclass
class _Pending:
    keys: Sequence[bytes]
    deadline: float
    future: Future[PeerAnswer]


class BatchingPeer:
    """`peer` behind a window: while a call to the peer is in flight, the requests that arrive
    within `window_s` of the first one (up to `max_batch` keys) go out as one call, with the
    latest of their deadlines; each caller gets its own slice of the answer (and still waits
    only until its own deadline). With no call in flight a request goes at once (with whatever
    is queued already): a lone caller pays no window."""

    def __init__(
        self, peer: PeerPort, window_s: float = DEFAULT_WINDOW_S, max_batch: int = DEFAULT_MAX_BATCH
    ) -> None:
        self.peer = peer
        self.name, self.block = peer.name, peer.block
        self.window_s = window_s
        self.max_batch = max_batch
        self.calls = 0  # merged calls sent (the benchmark reports keys per call)
        self._inflight = 0  # merged calls not answered yet
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[_Pending | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=f"batch-{peer.name}", daemon=True)
        self._thread.start()

    def embed(self, keys: Sequence[bytes], deadline: float) -> Future[PeerAnswer]:
        future: Future[PeerAnswer] = Future()
        self._queue.put(_Pending(list(keys), deadline, future))
        return future

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=5.0)

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            size = len(first.keys)
            with self._lock:
                idle = self._inflight == 0
            until = time.monotonic() + (0.0 if idle else self.window_s)
            while size < self.max_batch:
                left = until - time.monotonic()
                try:
                    item = self._queue.get(timeout=left) if left > 0 else self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._queue.put(None)  # close after this batch
                    break
                batch.append(item)
                size += len(item.keys)
            self._send(batch)

    def _send(self, batch: list[_Pending]) -> None:
        live = [p for p in batch if p.deadline > time.monotonic()]
        for p in batch:
            if p not in live:
                p.future.set_exception(PeerFailure(TIMED_OUT))
        if not live:
            return
        keys = [k for p in live for k in p.keys]
        self.calls += 1
        with self._lock:
            self._inflight += 1
        merged = self.peer.embed(keys, max(p.deadline for p in live))
        merged.add_done_callback(lambda done: self._answered(done, live))

    def _answered(self, done: Future[PeerAnswer], batch: list[_Pending]) -> None:
        with self._lock:
            self._inflight -= 1
        _split(done, batch)


def _split(done: Future[PeerAnswer], batch: list[_Pending]) -> None:
    """Each caller's slice of a merged answer (or the merged call's failure)."""
    err = done.exception()
    if err is not None:
        for p in batch:
            p.future.set_exception(err)
        return
    answer = done.result()
    at, row = 0, 0
    for p in batch:
        held = answer.held[at : at + len(p.keys)]
        count = int(held.sum())
        p.future.set_result(PeerAnswer(held, answer.embeddings[row : row + count]))
        at, row = at + len(p.keys), row + count
