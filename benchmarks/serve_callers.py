"""The callers of `vfl bench serve`: threads with one keep-alive HTTP connection each, one ID per
request, back to back, optionally spread over several processes (real callers are separate
applications; 64 threads of one Python process share one interpreter lock, which adds its waits
to the latency they measure). Standard library only, so a caller process starts quickly: it
stays outside benchmarks/serve/, whose import brings torch and pyarrow into every caller process.

Each reply is a `Reply`: seconds the caller waited, answered, parties used, the gateway's own
seconds on it from its `Server-Timing` header (-1 without one), when it was sent, the
gateway's seconds in each step of it (the header's other metrics: read, own, parties, heads),
the HTTP status (429: shed by admission control) and the parties the answer names as missing.
"""

from __future__ import annotations

import http.client
import json
import multiprocessing
import re
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import NamedTuple

_METRIC = re.compile(r"(\w+);dur=([0-9.]+)")


class Reply(NamedTuple):
    took: float  # seconds the caller waited
    ok: bool
    used: int  # parties the answer is from
    server_s: float  # the gateway's own seconds on it, -1 without a Server-Timing header
    sent: float = 0.0  # time.monotonic() when sent
    steps: dict[str, float] = {}  # noqa: RUF012 (never mutated) the gateway's seconds per step
    status: int = 200
    missing: tuple[str, ...] = ()  # the parties the answer names as missing
    why: tuple[str, ...] = ()  # ... and why each is missing, in the same order
    shed_reason: str = ""  # a 429: admission control's reason


def post(conn: http.client.HTTPConnection, body: dict) -> tuple[int, dict, float]:
    """(status, JSON body, the gateway's seconds or -1)."""
    status, answer, steps, _ = post_timed(conn, body)
    return status, answer, steps.get("gateway", -1.0)


def post_timed(
    conn: http.client.HTTPConnection, body: dict, deadline_s: float | None = None
) -> tuple[int, dict, dict[str, float], float]:
    """(status, JSON body, the seconds of each Server-Timing metric, Retry-After seconds or 0).
    `deadline_s`: stamp the request with the caller's own deadline, that long from now (the
    X-Deadline-At header). An answer's X-Answered-At (the gateway's wall clock at its last
    deadline check, just before it wrote the reply) gives the metric `after`: from then to
    this caller having read the reply (the reply's way back; one machine, one clock)."""
    headers = {"Content-Type": "application/json"}
    if deadline_s is not None:
        headers["X-Deadline-At"] = f"{time.time() + deadline_s:.6f}"
    conn.request("POST", "/predict", json.dumps(body), headers)
    reply = conn.getresponse()
    timing = _METRIC.findall(reply.getheader("Server-Timing") or "")
    retry = float(reply.getheader("Retry-After") or 0)
    answered_at = reply.getheader("X-Answered-At")
    body = json.loads(reply.read())
    steps = {k: float(ms) / 1000 for k, ms in timing}
    if answered_at is not None:
        steps["after"] = time.time() - float(answered_at)
    return reply.status, body, steps, retry


def load(
    port: int | Sequence[int],
    ids: list[str],
    start: float,
    end: float,
    callers: int,
    first: int,
    every: int,
    deadline_s: float | None = None,
    honour_retry: bool = False,
) -> list[Reply]:
    """Callers first, first + every, ... (of `every` in all), each from `start` to `end`
    (time.monotonic(), the same clock in every process), back to back; with several ports
    (gateway replicas), caller k asks the one at port[k mod their number]. `deadline_s`: each
    request stamped with the caller's deadline, that long after it is sent. `honour_retry`: a
    caller shed (429) waits the reply's Retry-After before asking again (else at once)."""
    out: list[Reply] = []
    lock = threading.Lock()
    ports = [port] if isinstance(port, int) else list(port)

    def caller(k: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", ports[k % len(ports)], timeout=30)
        conn.connect()  # before the cell: its first request does not time the TCP handshake
        i, mine = k, []
        time.sleep(max(0.0, start - time.monotonic()))
        while time.monotonic() < end:
            sent, begin = time.monotonic(), time.perf_counter()
            status, body, steps, retry = post_timed(conn, {"ids": [ids[i % len(ids)]]}, deadline_s)
            took = time.perf_counter() - begin
            answer = body.get("predictions", [{}])[0] if status == 200 else {}
            ok = status == 200 and "error" not in answer
            server_s = steps.pop("gateway", -1.0)
            used, missing = len(answer.get("parties", ())), answer.get("missing", {})
            names, why = tuple(missing), tuple(missing.values())
            shed = _shed_reason(body) if status == 429 else ""
            mine.append(Reply(took, ok, used, server_s, sent, steps, status, names, why, shed))
            i += callers
            if honour_retry and status == 429:
                time.sleep(max(0.0, min(retry, end - time.monotonic())))
        conn.close()
        with lock:
            out.extend(mine)

    threads = [threading.Thread(target=caller, args=(k,)) for k in range(first, callers, every)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def _shed_reason(body: dict) -> str:
    """ "overloaded: REASON (detail); retry ..." -> REASON."""
    error = str(body.get("error", ""))
    return error.removeprefix("overloaded: ").split(" (")[0]


class Callers:
    """`processes` caller processes (spawned once, reused by every cell); 1: threads here."""

    def __init__(self, processes: int) -> None:
        self.processes = processes
        self._pool = None
        if processes > 1:
            context = multiprocessing.get_context("spawn")  # no fork of a threaded process
            self._pool = ProcessPoolExecutor(processes, mp_context=context)
            list(self._pool.map(time.sleep, [0.0] * processes))  # started before any cell

    def __enter__(self) -> Callers:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown()

    def run(
        self,
        port: int | Sequence[int],
        ids: list[str],
        seconds: float,
        callers: int,
        deadline_s: float | None = None,
        honour_retry: bool = False,
    ) -> list[Reply]:
        """Every reply of `callers` callers for `seconds`, spread over the processes;
        `deadline_s`: the deadline each caller stamps on its requests (None: none);
        `honour_retry`: a caller shed waits the reply's Retry-After."""
        start = time.monotonic() + (0.5 if self._pool is not None else 0.0)
        end = start + seconds
        if self._pool is None or callers == 1:
            return load(port, ids, start, end, callers, 0, 1, deadline_s, honour_retry)
        every = min(self.processes, callers)
        jobs = [
            self._pool.submit(
                load, port, ids, start, end, callers, first, every, deadline_s, honour_retry
            )
            for first in range(every)
        ]
        return [r for job in jobs for r in job.result()]
