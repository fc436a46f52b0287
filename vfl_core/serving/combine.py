"""Run one piece of work once for every concurrent request that needs it (flat combining).

The gateway's own embedding and its head are a few small torch calls whose fixed cost (the
dispatcher, tensor creation, the interpreter) dwarfs the arithmetic of one row. Under load, many
request threads need them at once: `Combiner.run(item)` lets the first caller run the work for
every item queued meanwhile (up to `max_items`), in one call, and hands each caller its own
result. No thread is added and no window is waited: a lone caller runs its own item at once,
and callers that arrive while a batch runs are the next batch. A caller whose item is done
leaves, handing the lead to the first caller still queued, so no caller runs others' work for
longer than its own batch and the next.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

DEFAULT_MAX_ITEMS = 256  # requests in one batch


class _Slot(Generic[T, R]):
    __slots__ = ("done", "error", "item", "result", "wake")

    def __init__(self, item: T) -> None:
        self.item = item
        self.result: R | None = None
        self.error: BaseException | None = None
        self.done = False
        self.wake = threading.Event()  # set when done, or when this caller is to lead

    def outcome(self) -> R:
        if self.error is not None:
            raise self.error
        return self.result  # type: ignore[return-value]


class Combiner(Generic[T, R]):
    """`work(items) -> results` (one result per item, in order) run for batches of the items
    that concurrent `run` calls bring. An exception from `work` is raised to every caller of
    that batch."""

    def __init__(
        self, work: Callable[[Sequence[T]], Sequence[R]], max_items: int = DEFAULT_MAX_ITEMS
    ) -> None:
        self._work = work
        self.max_items = max_items
        self.batches = 0  # batches run (tests and the benchmark read items per batch)
        self.items = 0
        self._queue: list[_Slot[T, R]] = []
        self._busy = False  # a caller is leading
        self._lock = threading.Lock()

    def run(self, item: T) -> R:
        slot: _Slot[T, R] = _Slot(item)
        with self._lock:
            self._queue.append(slot)
            lead = not self._busy
            self._busy = True
        if not lead:
            slot.wake.wait()
            if slot.done:
                return slot.outcome()
        while not slot.done:  # leading: run batches until this caller's item is done
            with self._lock:
                batch = self._queue[: self.max_items]
                del self._queue[: self.max_items]
            self._run(batch)
        with self._lock:  # hand the lead on, or stop leading
            if self._queue:
                self._queue[0].wake.set()
            else:
                self._busy = False
        return slot.outcome()

    def _run(self, batch: list[_Slot[T, R]]) -> None:
        self.batches += 1
        self.items += len(batch)
        try:
            results = self._work([s.item for s in batch])
            if len(results) != len(batch):
                raise RuntimeError(f"combined work gave {len(results)} results for {len(batch)}")
            for s, r in zip(batch, results, strict=True):
                s.result = r
        except BaseException as err:  # every caller of the batch sees why
            for s in batch:
                s.error = err
        for s in batch:
            s.done = True
            s.wake.set()
