"""A large table's per-column work on two threads: each column's numbers, codes, fit and
transform are worked out apart from every other column's.

After Arrow's parse (on the party's own thread, vfl_core.data.csv_pieces) a party's load works
a column at a time: mostly numpy and Arrow compute, which let go of Python's lock while they
run (70-85 % of the time, measured in benchmarks/results/table_read.md), so a second thread
puts the second core, idle after the parse, to work. The results come back in the columns'
order, each once it and those before it are done, and the first error in that order is the one
raised: what a caller does with them (freeing a written column, naming a bad cell) is as on one
thread. Small tables stay on the caller's thread: there a thread costs more than it saves, and
their warnings come in the columns' order.

Memory: a thread's allocators keep what it freed for its own later use (glibc's malloc an arena
per thread, Arrow's mimalloc a heap per thread), which the party's thread never reuses. The
threads end with each batch of work, and the blocks they leave free are then handed back
(`release_free_memory`): without that, the peak of a 27 MB file's load was 5-9 MB higher.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import pyarrow as pa

THREADS = 2
MIN_ROWS = 50_000  # a table of fewer rows is worked on the caller's thread

Item = TypeVar("Item")
Result = TypeVar("Result")


def each_column(
    work: Callable[[Item], Result], items: Sequence[Item], rows: int
) -> Iterator[Result]:
    """work(item) for each item (a column), yielded in the items' order; on THREADS threads
    where the table has MIN_ROWS rows or more."""
    if rows < MIN_ROWS or len(items) < 2:
        yield from map(work, items)
        return
    todo = iter(items)
    try:
        with ThreadPoolExecutor(THREADS, thread_name_prefix="table-column") as pool:
            # THREADS items in hand at a time: threads that ran ahead of a caller kept from its
            # thread (a loaded machine) would hold the work of every column at once
            pending = deque(pool.submit(work, item) for item in itertools.islice(todo, THREADS))
            try:
                while pending:
                    result = pending.popleft().result()
                    pending.extend(pool.submit(work, item) for item in itertools.islice(todo, 1))
                    yield result
            finally:
                for future in pending:  # an error or a caller that stopped: no more work
                    future.cancel()
    finally:
        release_free_memory()  # the threads have ended


def release_free_memory() -> None:
    """Hand the blocks Arrow's pool and C's malloc hold free back to the system (malloc's on
    glibc only: elsewhere there is no call for it)."""
    pa.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, which returns the free memory of every arena (threads' too)."""
    try:
        return ctypes.CDLL(None).malloc_trim  # the process's own symbols, libc's among them
    except (OSError, AttributeError, TypeError):  # not glibc (macOS, musl, Windows)
        return None
