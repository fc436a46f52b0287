"""`vfl bench serve`: online serving latency and throughput (issue 31).

Credit (UCI, 30 000 rows; shared/data) cut into K = 4 party tables of 5 columns each, ID = row
number, labels at party0; LASER-VFL with the paper's Credit MLP (5 -> 10 -> 10 -> 10, linear
head) trained in process for a little (latency does not depend on the weights), each party's
bundle written; then four `vfl-client --serve-bundle` processes on 127.0.0.1 (plaintext), party0
the gateway with a --peer per other party, each peer link through a shaping proxy
(benchmarks/netshape.py) with the cell's RTT. Callers are threads, each with one keep-alive HTTP
connection, one ID per request, back to back, in this process or spread over
`caller_processes` processes (benchmarks/serve_callers.py). Per cell: requests, throughput,
latency p50/p95/p99 as the callers saw it and p50/p99 of the gateway's own time (its
`Server-Timing` header), requests failed (not 200 or no prediction) and answered from a subset
of the parties; modes: every party up, party3 SIGKILLed a third into the run (restarted after it),
party3 SIGSTOPped a third into the run (continued after it). Beside it: rows/s of batch
prediction, the gateway with 256 IDs a request and the federation's own batch predict in
process (the engine `vfl predict` drives) on the same model.
"""

from __future__ import annotations

import gc
import http.client
import json
import logging
import os
import platform
import signal
import statistics
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from benchmarks.netshape import NetShaper, Shape
from benchmarks.serve.cluster import (
    ServingCluster,
    acceptance_lines,
    late_answers,
    live_missing_why,
    measure,
    mode_text,
    report_lines,
    shed_counted,
    shed_why,
    start_replicas,
    train_bundles,
    warm,
    why_table,
)
from benchmarks.serve_callers import Callers, Reply, post
from vfl_core.config import TrainConfig
from vfl_core.model.model_config import ModelConfig

log = logging.getLogger(__name__)

CREDIT_FILE = "UCI_Credit_Card.csv"
LABEL = "default"
ID = "id"
PARTIES = 4
COLUMNS_PER_PARTY = 5
VICTIM = "party3"


@dataclass(frozen=True)
class ServeJob:
    results: Path
    data_path: Path
    command: str
    callers: tuple[int, ...] = (1, 8, 64)
    rtts_ms: tuple[float, ...] = (0.0, 10.0, 50.0)
    modes: tuple[str, ...] = ("up", "kill", "stop")
    seconds: float = 3.0
    deadline_ms: float = 100.0
    window_ms: float = 2.0
    epochs: int = 1
    device: str = "cpu"  # the serving parties' --device
    # The callers spread over this many processes: real callers are other applications, and 64
    # threads of one Python process measure that process's interpreter lock (serve.md)
    caller_processes: int = 4
    # gateway processes side by side, e.g. (1, 2, 4); () = not measured (serve/cluster.py)
    gateways: tuple[int, ...] = ()
    scale_rounds: int = 2
    # the callers stamp each request with their own deadline (X-Deadline-At, deadline_ms from
    # when they send it), so that time before the gateway reads it counts against it; a cell
    # per choice, e.g. (True, False) side by side
    stamps: tuple[bool, ...] = (True,)
    # a caller shed (429) waits the reply's Retry-After (1 s) before asking again, as an HTTP
    # client with back-off does; False: at once. A cell per choice
    retries: tuple[bool, ...] = (False,)


@dataclass(frozen=True)
class Cell:
    rtt_ms: float
    callers: int
    mode: str
    requests: int
    per_s: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    failed: int  # neither answered nor shed (a 429), or an answer without a prediction
    subset: int
    shed: int = 0  # 429: shed by admission control
    live_missing: int = 0  # answers missing a party that was alive (any but the faulted one)
    answered_p99_ms: float = -1.0  # p99 of the answered requests (200), as the callers saw it
    server_p50_ms: float = -1.0  # the gateway's own time (Server-Timing); -1: not reported
    server_p99_ms: float = -1.0
    at_fault: int = 0  # kill/stop: requests in flight when the signal was sent
    settled_p99_ms: float = -1.0  # kill/stop: p99 of the requests sent from SETTLE_S after it
    median_steps: dict[str, float] | None = None  # ms in each step, mean over the middle 10%
    tail_steps: dict[str, float] | None = None  # ... over the slowest 1%
    stamped: bool = False  # the callers stamped their own deadline on each request
    honour_retry: bool = False  # a caller shed waited the reply's Retry-After
    live_missing_why: dict[str, int] | None = None  # reason -> live parties missing for it
    shed_why: dict[str, int] | None = None  # reason -> requests shed for it
    shed_counted: float | None = None  # the gateway's own count of requests shed (/metrics)
    # answers the callers had later than the deadline + 15 ms, and the mean ms of those spent
    # after the gateway's last deadline check (X-Answered-At) on them
    late_answers: int = 0
    late_after_ms: float = -1.0


SETTLE_S = 0.5
# where a request's time went: queue (the caller's time less the gateway's: before the gateway
# read its request line, and the reply's way back), then the gateway's steps (Server-Timing),
# then after: from the gateway's last deadline check to the caller having read the answer
STEPS = ("queue", "loop", "read", "own", "parties", "heads", "after")


def credit_tables(data_path: Path, out: Path) -> list[Path]:
    """party<k>.csv: the ID, columns 5k..5k+4 of the first 20, and at party0 the label."""
    source = data_path / CREDIT_FILE
    if not source.is_file():
        raise FileNotFoundError(f"{source}: the Credit data set (shared/data) is needed")
    table = pacsv.read_csv(source)
    ids = pa.array([str(i) for i in range(table.num_rows)])
    features = [n for n in table.column_names if n != LABEL][: PARTIES * COLUMNS_PER_PARTY]
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for k in range(PARTIES):
        names = features[k * COLUMNS_PER_PARTY : (k + 1) * COLUMNS_PER_PARTY]
        names += [LABEL] if k == 0 else []
        columns = {ID: ids} | {n: table.column(n) for n in names}
        if k == 0:  # a class label, not a number
            columns[LABEL] = pc.cast(table.column(LABEL), pa.string())
        paths.append(out / f"party{k}.csv")
        pacsv.write_csv(pa.table(columns), paths[-1])
    return paths


def run(job: ServeJob) -> dict[str, object]:
    """Every cell of the job; returns the record write_report formats."""
    load_before, commit = os.getloadavg(), _commit()  # the code as it starts
    with tempfile.TemporaryDirectory(prefix="vfl-serve-") as tmp:
        work = Path(tmp)
        tables = credit_tables(job.data_path, work / "tables")
        config = TrainConfig(
            epochs=job.epochs,
            batch_size=128,
            lr=1e-3,
            model=ModelConfig(representation="mlp", hidden=(10, 10), embed_dim=10, head="linear"),
        )
        bundles, fed, _ = train_bundles(
            tables, work / "bundles", id_column=ID, label_column=LABEL, config=config
        )
        ids = [str(i) for i in range(0, 30000, 7)][:2000]
        batch = {"in_process_rows_per_s": _in_process_rows_per_s(fed)}
        with (
            NetShaper() as shaper,
            ServingCluster(work / "procs", device=job.device) as cluster,
            Callers(job.caller_processes) as callers_,
        ):
            ports, links = {}, []
            for k in range(1, PARTIES):
                ports[k] = cluster.start_party(f"party{k}", bundles[k], tables[k], ID).port
                links.append(shaper.link(Shape(), seed=k))
            direct = [f"{k}=127.0.0.1:{ports[k]}" for k in range(1, PARTIES)]
            shaped = [
                f"{k}=127.0.0.1:{shaper.listen(links[k - 1], ('127.0.0.1', ports[k]))}"
                for k in range(1, PARTIES)
            ]
            extra = ["--deadline-ms", str(job.deadline_ms), "--batch-window-ms", str(job.window_ms)]
            gateways = {  # RTT 0: the peers directly; else through the shaping proxy
                False: cluster.start_gateway("party0", bundles[0], tables[0], ID, direct, extra),
                True: cluster.start_gateway("wan-gw", bundles[0], tables[0], ID, shaped, extra),
            }
            for gateway in gateways.values():
                _warm(gateway.http_port, ids)
            # the callers may be threads of this process: its trained federation and torch
            # would otherwise cost them full collections of ~100 ms inside the timed cells
            gc.collect()
            gc.freeze()
            port = gateways[False].http_port
            batch["gateway_rows_per_s"] = _gateway_rows_per_s(port, ids, job.seconds)
            cells = []
            for rtt in job.rtts_ms:
                shaper.set_shape(Shape.of(rtt, None))
                port = gateways[rtt > 0].http_port
                for callers in job.callers:
                    for mode in job.modes:
                        for stamp, retry in [(s, r) for s in job.stamps for r in job.retries]:
                            cell = _cell(job, cluster, callers_, port, ids, rtt, callers, mode,
                                         stamp, retry)  # fmt: skip
                            _restore(cluster, mode, bundles[3], tables[3], ports[3])
                            log.warning("%s", cell)
                            cells.append(cell)
            scale = _scale_out(job, cluster, callers_, gateways[False], bundles, tables, ids)
    return {
        "command": job.command,
        "commit": commit,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, shared",
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "job": {k: v for k, v in job.__dict__.items() if k not in ("results", "data_path")},
        "batch": batch,
        "cells": [c.__dict__ for c in cells],
        "scale": scale,
    }


def _scale_out(job, cluster, callers_, first, bundles, tables, ids) -> dict[str, object]:
    """Throughput with 1, 2, 4 ... gateway processes (benchmarks/serve/cluster.py)."""
    if not job.gateways:
        return {"cells": []}
    peers = [f"{k}=127.0.0.1:{cluster.procs[f'party{k}'].port}" for k in range(1, PARTIES)]
    extra = ["--deadline-ms", str(job.deadline_ms), "--batch-window-ms", str(job.window_ms)]
    replicas = start_replicas(
        cluster, max(job.gateways) - 1, bundles[0], tables[0], ID, peers, extra
    )
    for replica in replicas:
        warm(replica.http_port, ids)
    parties = [cluster.procs[f"party{k}"] for k in range(1, PARTIES)]
    before = os.getloadavg()
    cells = measure(
        callers_, [first, *replicas], parties, ids, job.gateways, job.callers, job.seconds,
        job.scale_rounds,
    )  # fmt: skip
    for cell in cells:
        log.warning("%s", cell)
    return {"cells": [c.__dict__ for c in cells], "before": before, "after": os.getloadavg()}


def _cell(job, cluster, callers_, port, ids, rtt, callers, mode, stamp=True, retry=False) -> Cell:
    fault, fault_at = None, []
    lead_s = 0.5 if job.caller_processes > 1 else 0.0  # the processes' common start
    if mode != "up":
        sig = signal.SIGKILL if mode == "kill" else signal.SIGSTOP

        def send() -> None:
            fault_at.append(time.monotonic())
            cluster.signal(VICTIM, sig)

        fault = threading.Timer(lead_s + job.seconds / 3, send)
        fault.start()
    stamp_s = job.deadline_ms / 1000 if stamp else None
    counted = shed_counted(port)
    replies = callers_.run(port, ids, job.seconds, callers, stamp_s, retry)
    counted = shed_counted(port) - counted
    if fault is not None:
        fault.join()
    took = sorted(r.took for r in replies)
    q = _quantiles(took)
    answered = _quantiles(sorted(r.took for r in replies if r.status == 200))
    faulted = set() if mode == "up" else {VICTIM}
    server = _quantiles(sorted(r.server_s for r in replies if r.server_s >= 0))
    return Cell(
        rtt_ms=rtt,
        callers=callers,
        mode=mode,
        stamped=stamp,
        honour_retry=retry,
        requests=len(replies),
        per_s=len(replies) / job.seconds,
        p50_ms=1000 * statistics.median(took),
        p95_ms=1000 * q[94],
        p99_ms=1000 * q[98],
        failed=sum(1 for r in replies if not r.ok and r.status != 429),
        subset=sum(1 for r in replies if r.ok and r.used < PARTIES),
        shed=sum(1 for r in replies if r.status == 429),
        live_missing=sum(1 for r in replies if r.ok and set(r.missing) - faulted),
        live_missing_why=live_missing_why(replies, faulted),
        shed_why=shed_why(replies),
        shed_counted=counted,
        **late_answers(replies, job.deadline_ms),
        answered_p99_ms=1000 * answered[98] if answered else -1.0,
        server_p50_ms=1000 * server[49] if server else -1.0,
        server_p99_ms=1000 * server[98] if server else -1.0,
        **_fault_figures(replies, fault_at[0] if fault_at else None),
        **_where_time_went(replies),
    )


def _fault_figures(replies: list[Reply], at: float | None) -> dict[str, object]:
    """How many requests the fault caught in flight (each may wait for the party up to its
    deadline), and the p99 of those sent once the gateway had SETTLE_S to adapt."""
    if at is None:
        return {}
    settled = sorted(r.took for r in replies if r.sent >= at + SETTLE_S)
    return {
        "at_fault": sum(1 for r in replies if r.sent <= at < r.sent + r.took),
        "settled_p99_ms": 1000 * _quantiles(settled)[98] if settled else -1.0,
    }


def _where_time_went(replies: list[Reply]) -> dict[str, object]:
    """Mean ms in each of STEPS over the middle 10% and over the slowest 1% of the requests."""
    timed = sorted((r for r in replies if r.server_s >= 0), key=lambda r: r.took)
    if not timed:
        return {}
    n = len(timed)

    def mean_steps(part: list[Reply]) -> dict[str, float]:
        def step(r: Reply, name: str) -> float:
            return r.took - r.server_s if name == "queue" else r.steps.get(name, 0.0)

        return {k: 1000 * statistics.fmean(step(r, k) for r in part) for k in STEPS}

    middle = timed[n // 2 - n // 20 : n // 2 + n // 20 + 1]
    slowest = timed[-max(1, n // 100) :]
    return {"median_steps": mean_steps(middle), "tail_steps": mean_steps(slowest)}


def _quantiles(values: list[float]) -> list[float]:
    """quantiles(n=100) of sorted `values`: [49] is the median, [94] p95, [98] p99."""
    if len(values) > 1:
        return statistics.quantiles(values, n=100, method="inclusive")
    return values * 99


def _restore(cluster: ServingCluster, mode: str, bundle: Path, table: Path, port: int) -> None:
    """party3 back as it was: continued, or started again on its port."""
    if mode == "stop":
        cluster.signal(VICTIM, signal.SIGCONT)
    elif mode == "kill":
        cluster.procs.pop(VICTIM).popen.wait(timeout=30)
        cluster.start_party(VICTIM, bundle, table, ID, listen=f"127.0.0.1:{port}")
    time.sleep(0.5)  # the gateway's channel reconnects


def _warm(port: int, ids: list[str]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    for i in ids[:50]:
        post(conn, {"ids": [i]})
    conn.close()


def _gateway_rows_per_s(port: int, ids: list[str], seconds: float) -> float:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    rows, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        status, body, _ = post(conn, {"ids": ids[:256], "deadline_ms": 1000})
        rows += len(body.get("predictions", ())) if status == 200 else 0
    conn.close()
    return rows / (time.perf_counter() - start)


def _in_process_rows_per_s(fed) -> float:
    start = time.perf_counter()
    rows = sum(len(b.index) for b in fed.predict_batches("test"))
    return rows / (time.perf_counter() - start)


def write_report(record: dict[str, object], results: Path) -> tuple[Path, str]:
    results.mkdir(parents=True, exist_ok=True)  # the record first: kept if the text fails
    (results / "serve.json").write_text(json.dumps(record, indent=2, default=str))
    job, batch = record["job"], record["batch"]
    lines = [
        "# Online serving: latency and throughput",
        "",
        f"Command: `{record['command']}` (code at {record.get('commit', 'unknown')})",
        "",
        f"Machine: {record['machine']}; load average (1, 5, 15 min) before "
        f"{_load_text(record['load_before'])}, after {_load_text(record['load_after'])}.",
        "",
        "Credit, K = 4 parties of 5 columns, the paper's MLP (5 -> 10 -> 10 -> 10, linear head); "
        f"four `vfl-client --serve-bundle --device {job.get('device', 'cpu')}` processes on "
        "127.0.0.1, plaintext gRPC, party0 the "
        "gateway. RTT 0: the gateway dials the parties directly; RTT > 0: a second gateway "
        "process dials them through the shaping proxy (benchmarks/netshape.py, an asyncio relay "
        "in the benchmark process) with that RTT on every gateway -> party link. "
        f"Deadline {job['deadline_ms']:g} ms, batching window "
        f"{job['window_ms']:g} ms, {job['seconds']:g} s per cell, one ID per request, callers "
        "back to back over keep-alive HTTP, threads spread over "
        f"{_processes(job.get('caller_processes', 1))}. p50/p95/p99: as the callers saw it; "
        "gateway p50/p99: the gateway's own time on a request, from its handler's start to "
        "its reply written (its `Server-Timing` header). kill: party3 SIGKILLed a "
        "third into the cell; stop: SIGSTOPped a third into the cell. shed: 429 (admission "
        "control); answered p99: of the 200s; failed: neither answered nor shed, or no "
        "prediction; subset: answered from fewer than 4 parties; live missing: answers "
        "missing a party that was alive (any but party3 in kill and stop). Mode with "
        "`stamped`: each caller stamps its request with its own deadline when sending it "
        "(the `X-Deadline-At` header, the deadline from then), so the time before the "
        "gateway reads it counts against it; `unstamped`: the deadline runs from the "
        "gateway's handler starting. `Retry-After`: a caller shed waits the 429's "
        "Retry-After (1 s) before asking again, as an HTTP client with back-off does; "
        "without it, it asks again at once.",
        "",
        "| RTT ms | callers | mode | requests | req/s | p50 ms | p95 ms | p99 ms | gateway p50 "
        "| gateway p99 | shed | answered p99 | failed | subset | live missing |",
        "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| ---: | ---: | ---: |",
    ]
    for c in record["cells"]:
        lines.append(
            f"| {c['rtt_ms']:g} | {c['callers']} | {mode_text(c)} | {c['requests']} | "
            f"{c['per_s']:.0f} | {c['p50_ms']:.1f} | {c['p95_ms']:.1f} | {c['p99_ms']:.1f} | "
            f"{_ms(c.get('server_p50_ms', -1))} | {_ms(c.get('server_p99_ms', -1))} | "
            f"{c.get('shed', 0)} | {_ms(c.get('answered_p99_ms', -1))} | "
            f"{c['failed']} | {c['subset']} | {c.get('live_missing', 0)} |"
        )
    lines += acceptance_lines(record["cells"], job["deadline_ms"])
    lines += why_table(record["cells"])
    lines += _steps_table(record["cells"])
    scale = record.get("scale") or {"cells": []}
    lines += report_lines(scale["cells"], scale)
    lines += [
        "",
        "Batch prediction on the same model, rows/s: the gateway with 256 IDs a request (1 "
        f"caller, RTT 0): {batch['gateway_rows_per_s']:.0f}; the federation's "
        "batch predict of the test split in process (`Federation.predict_batches`, the engine "
        f"`vfl predict` drives, without gRPC): {batch['in_process_rows_per_s']:.0f}.",
        "",
    ]
    text = "\n".join(lines)
    path = results / "serve.md"
    path.write_text(text)
    return path, text


def _steps_table(cells: list[dict]) -> list[str]:
    """Where the time of the middle 10% and of the slowest 1% went, and what a fault caught."""
    rows = [c for c in cells if c.get("tail_steps")]
    if not rows:
        return []
    head = " | ".join(f"{k} mid / slow" for k in STEPS)
    lines = [
        "",
        "Where the time went, mean ms over the middle 10% of each cell's requests / over its "
        "slowest 1%: queue = the caller's time less the gateway's (before the gateway read the "
        "request line, and the reply's way back), loop = of the queue, the wait between the "
        "gateway's event loop reading the request and its handler starting, read = its "
        "headers, body and JSON, own = the "
        "gateway's own embedding, parties = waiting for the other parties, heads = the head "
        "(its `Server-Timing` steps), after = of the queue, from the gateway's last deadline "
        "check on an answer (its `X-Answered-At`) to the caller having read it (answers "
        "only; 0 for a 429). in flight at fault: requests sent before the signal and "
        f"answered after it (% of the cell); settled p99: requests sent {SETTLE_S:g} s or more "
        "after it.",
        "",
        f"| RTT ms | callers | mode | {head} | in flight at fault | settled p99 |",
        "| ---: | ---: | --- |" + " ---: |" * (len(STEPS) + 2),
    ]
    for c in rows:
        mid, slow = c["median_steps"], c["tail_steps"]
        steps = " | ".join(f"{mid[k]:.1f} / {slow[k]:.1f}" for k in STEPS)
        fault = "-"
        if c["mode"] != "up":
            fault = f"{c['at_fault']} ({100 * c['at_fault'] / max(1, c['requests']):.1f}%)"
        lines.append(
            f"| {c['rtt_ms']:g} | {c['callers']} | {mode_text(c)} | {steps} | {fault} | "
            f"{_ms(c.get('settled_p99_ms', -1))} |"
        )
    return lines


def _commit() -> str:
    """The checkout's commit, when this runs from a git checkout."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, timeout=10, cwd=Path(__file__).parent,
        )  # fmt: skip
    except OSError:
        return "unknown"
    return out.stdout.strip() or "unknown"


def _processes(n: int) -> str:
    return "the benchmark process" if n <= 1 else f"{n} caller processes"


def _ms(value: float) -> str:
    return "-" if value < 0 else f"{value:.1f}"


def _load_text(load: object) -> str:
    return ", ".join(f"{x:.2f}" for x in load)  # type: ignore[union-attr]
