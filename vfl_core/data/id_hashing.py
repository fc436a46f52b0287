"""The test split's hashes of a party's sample IDs, worked out on a second thread while its file
is read.

The split (vfl_core.data.sample_ids.split_keys) hashes every ID with a Python call each, about
as long as Arrow takes to parse the file. Arrow parses on the party's thread without holding
Python's lock (vfl_core.data.csv_pieces), so the IDs of each piece of the file already parsed
are hashed on a second thread meanwhile: on two free cores, the hashing costs the load next to
no time. The keys are the same as split_keys', checked against the ID column the table ends up
with (its cells cleaned, its numbers' zero fractions dropped): where they differ, or the thread
met a missing ID, the IDs are hashed again on the caller's thread.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from types import TracebackType

import numpy as np
import pyarrow as pa

from vfl_core.data.sample_ids import split_keys, zero_fractions_dropped

log = logging.getLogger(__name__)

_RESTART = object()  # queued: the file is read again from its start
_DONE = object()  # queued: no more pieces


class SplitKeysWhileReading:
    """A csv_pieces.ColumnWatch of the ID column `column` that hashes each piece's IDs on a
    second thread as the file is read; `keys` gives them. A context manager: the thread ends
    with the block, however it ends."""

    def __init__(self, column: str) -> None:
        self.column = column
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._hashed: list[tuple[pa.Array, np.ndarray]] = []  # (IDs, their keys) per chunk
        self._failed = False
        self._thread: threading.Thread | None = None

    def __enter__(self) -> SplitKeysWhileReading:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop()

    def restart(self) -> None:
        self._queue.put(_RESTART)

    def __call__(self, cells: pa.ChunkedArray) -> None:
        self._start()
        for chunk in cells.chunks:
            self._queue.put(chunk)

    def then(self, job: Callable[[], None]) -> None:
        """Run `job` on the hashing thread once the IDs given so far are hashed: more work
        on each piece while the next is parsed, on the same thread (a thread of its own would
        wait for Python's lock, which the hashing holds, at each of its calls). Its errors
        are its own to catch."""
        self._start()
        self._queue.put(job)

    def _start(self) -> None:
        if self._thread is None:
            # a daemon: an interpreter exiting mid-read does not wait for it
            self._thread = threading.Thread(target=self._work, name="id-hashing", daemon=True)
            self._thread.start()

    def keys(self, ids: pa.ChunkedArray) -> np.ndarray:
        """split_keys(ids): those hashed while the file was read where they are of these IDs,
        else worked out now."""
        self._stop()
        hashed, self._hashed = self._hashed, []
        if hashed and not self._failed:
            read = pa.chunked_array([chunk for chunk, _ in hashed], ids.type)
            if read.equals(ids):
                return np.concatenate([keys for _, keys in hashed])
        log.debug("the IDs of %r hashed after the read", self.column)
        return split_keys(ids)

    def _stop(self) -> None:
        if self._thread is not None:
            self._queue.put(_DONE)
            self._thread.join()
            self._thread = None

    def _work(self) -> None:
        while (item := self._queue.get()) is not _DONE:
            if item is _RESTART:
                self._hashed.clear()
                self._failed = False
            elif callable(item):
                item()
            elif not self._failed:
                assert isinstance(item, pa.Array)
                try:
                    self._hash(item)
                except Exception:  # whatever it is, `keys` hashes the IDs again, and the
                    self._failed = True  # caller's own checks of them name what is wrong
            # not kept while the next is awaited: a job's cells, a chunk of IDs
            del item

    def _hash(self, chunk: pa.Array) -> None:
        ids = zero_fractions_dropped(pa.chunked_array([chunk]))
        if ids.null_count:  # a missing ID: the caller's check names its row
            self._failed = True
            return
        chunk = ids.chunk(0) if ids.num_chunks == 1 else ids.combine_chunks()
        self._hashed.append((chunk, split_keys(ids)))
