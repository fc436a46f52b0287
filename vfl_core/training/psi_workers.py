"""The worker processes that multiply large PSI lists: one pool per process, started once.

Why one pool, kept. Every pool starts its workers with `spawn` (a fresh interpreter that imports
the party's main module: torch and grpc for `vfl-client`), about a CPU second each. A pool per
call paid that at every PSI step, K times per party: at 20,000 IDs on a shared 2-core host it
tripled the CPU per multiplication (benchmarks/results/psi.md). Here the first large list starts
the pool and every later list of the process reuses it.

How many workers: `VFL_PSI_WORKERS` (1: none, lists are multiplied in the calling process), else
the cores this process may run on, shared (`share_cores`) when the parties share the host: a
client whose coordinator is on its own host (a demo, a test, a chaos run) assumes all K parties
are there and takes cores // K (at least 1), so K parties' workers together fit the cores
instead of each starting one per core. One machine per party keeps one worker per core.

Dying with the party. A worker asks the kernel for SIGKILL when its parent dies
(PR_SET_PDEATHSIG). Linux sends that signal when the *thread* that started the worker ends, not
only the process, so the workers are started from a thread of their own that lives as long as the
process: a pool first used by a short-lived thread (a gRPC handler, an alignment thread) would
otherwise lose its workers when that thread returned.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context

from vfl_core.errors import ConfigError

log = logging.getLogger(__name__)

ENV = "VFL_PSI_WORKERS"
PR_SET_PDEATHSIG = 1  # linux/prctl.h

# size -> (pid of the process that owns the pool, the pool): a forked child starts its own
_pools: dict[int, tuple[int, ProcessPoolExecutor]] = {}
_lock = threading.Lock()
_sharers = 1  # processes assumed to share this host's cores (`share_cores`)

Work = Callable[[bytes, bytes, str, int], bytes]


def share_cores(processes: int) -> None:
    """Size the default pool for `processes` processes of one federation on this host."""
    global _sharers
    _sharers = max(1, processes)


def workers() -> int:
    """Worker processes for large lists: `VFL_PSI_WORKERS`, else this process's share of the
    cores it may use (all of them unless `share_cores` said otherwise), at least 1."""
    text = os.environ.get(ENV, "").strip()
    if text:
        if not text.isdigit() or int(text) < 1:
            raise ConfigError(
                f"{ENV}={text[:20]!r}: give a whole number of PSI worker processes, 1 or more "
                "(1: multiply in the calling process)"
            )
        return int(text)
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, cores // _sharers)


def run(
    size: int, work: Work, secret: bytes, chunks: Sequence[tuple[int, bytes]], what: str
) -> bytes:
    """`work(secret, chunk, what, first)` for each (first, chunk) in the pool of `size` workers;
    the results concatenated in order. A pool whose worker died is started again, once."""
    for attempt in (1, 2):
        pool = _pool(size)
        jobs = [pool.submit(work, secret, chunk, what, first) for first, chunk in chunks]
        try:
            return b"".join(job.result() for job in jobs)
        except BrokenProcessPool:
            _discard(size, pool)
            if attempt == 2:
                raise
            log.warning("psi: a worker process died; starting %d workers again", size)
        finally:
            for job in jobs:  # after an error, the chunks not yet started are not wanted
                job.cancel()
    raise AssertionError("unreachable")


def worker_pids(size: int) -> list[int]:
    """The process ids of this process's pool of `size` workers (none before its first use)."""
    with _lock:
        entry = _pools.get(size)
    if entry is None or entry[0] != os.getpid():
        return []
    return sorted(p.pid for p in entry[1]._processes.values() if p.pid is not None)


def _pool(size: int) -> ProcessPoolExecutor:
    with _lock:
        entry = _pools.get(size)
        if entry is None or entry[0] != os.getpid():
            _pools[size] = (os.getpid(), _start(size))
        return _pools[size][1]


def _discard(size: int, pool: ProcessPoolExecutor) -> None:
    with _lock:
        if size in _pools and _pools[size][1] is pool:
            del _pools[size]
    pool.shutdown(wait=False, cancel_futures=True)


def _start(size: int) -> ProcessPoolExecutor:
    """A pool of `size` workers, all started now by a thread that never ends (see the module's
    docstring: PR_SET_PDEATHSIG follows the starting thread)."""
    started: Future[ProcessPoolExecutor] = Future()

    def own() -> None:
        try:
            pool = ProcessPoolExecutor(
                size,
                mp_context=get_context("spawn"),
                initializer=die_with_parent,
                initargs=(os.getpid(),),
            )
            # With spawn, a submit that finds no idle worker starts one: `size` submits start all.
            for job in [pool.submit(os.getpid) for _ in range(size)]:
                job.result()
        except BaseException as e:  # handed to the caller
            started.set_exception(e)
            return
        started.set_result(pool)
        threading.Event().wait()  # the workers' parent thread: it must outlive them

    threading.Thread(target=own, name=f"psi-workers-{size}", daemon=True).start()
    pool = started.result()
    log.info("psi: %d worker processes started", size)
    return pool


def die_with_parent(parent: int) -> None:
    """Worker start: have the kernel kill this worker when the party that started it dies.

    A worker only notices a dead parent when it next writes a result, after its chunk (minutes
    for a large list on a loaded machine: a chaos run found 32 workers of 16 killed clients still
    multiplying 85 s later). Linux only; elsewhere the worker ends at its next write as before.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux
        return
    if os.getppid() != parent:  # the parent died before prctl took effect: nobody will signal
        os._exit(1)
