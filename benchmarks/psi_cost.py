"""The cost of the PSI alignment (vfl_core.training.psi) over the real wire: K party processes, each
a real
`Party` behind the real `PartyServicer` and guard on a mutual-TLS gRPC server on 127.0.0.1, and
the coordinator's real `GrpcTransport` running `psi_align` in this process.

    python -m benchmarks.psi_cost --ids 10000,100000,1000000 --parties 4 [--overlap 0.9]
        [--out FILE.md]

Each party holds `ids` sample IDs drawn from a common universe (each universe ID is held by a
party with probability `overlap`, so the lists differ). The party processes have no features to
speak of (one float per row): only the alignment runs. Reported: wall time per phase, total wall
time, bytes that crossed the wire (points and keys, 32 bytes each), and a check that the PSI found
exactly the intersection patterns the plain IDs give.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from benchmarks.pool import code_version
from vfl_core.training import psi, psi_workers

if TYPE_CHECKING:
    from vfl_coordinator.transport import GrpcTransport

# The rest is imported where used. A party process here is started with `spawn`, and so are its
# PSI workers, and each imports this module as its main one: torch and grpc at the top would cost
# every worker ~2 CPU seconds and 250 MB that a real client's worker (whose main module,
# vfl_cli.client_cmd, imports them lazily) does not pay.


def _ids(k: int, n: int, parties: int, overlap: float, seed: int = 0) -> np.ndarray:
    """Party k's n IDs: the universe IDs it holds, by a per-ID coin with probability overlap."""
    universe = int(n / overlap) + parties
    held = np.random.default_rng([seed, k]).random(universe) < overlap
    ids = np.flatnonzero(held)[:n]
    return np.array([f"customer-{i:09d}" for i in ids])


def _serve(k: int, n: int, parties: int, overlap: float, certs: str, ports: mp.Queue) -> None:
    import logging

    from vfl_client.runner import start_server
    from vfl_client.servicer import PartyServicer
    from vfl_core.config import TrainConfig
    from vfl_core.data.party_dir import PartyData, PartyMeta, PartySplit
    from vfl_core.training.party import Party
    from vfl_wire.security import Security, load_identity

    psi_workers.die_with_parent(os.getppid())  # a benchmark stopped by a signal takes them along
    logging.basicConfig(level=logging.WARNING)
    psi_workers.share_cores(parties)  # as vfl-client does beside its coordinator
    ids = _ids(k, n, parties, overlap)
    meta = PartyMeta(
        dataset="synthetic", block=k, num_blocks=parties, kind="tabular", feature_shape=(1,),
        num_classes=2, has_labels=k == 0,
    )  # fmt: skip
    labels = np.zeros(len(ids), np.int64) if k == 0 else None
    split = PartySplit(ids, np.zeros((len(ids), 1), np.float32), labels)
    data = PartyData(meta, {"train": split})
    security = Security(load_identity(Path(certs), f"party{k}", need_token=True))
    servicer = PartyServicer(f"party{k}")
    servicer.attach(Party(f"party{k}", data, TrainConfig(), secret=b"-"), "psi-bench")
    server, port = start_server(servicer, "127.0.0.1:0", security)
    ports.put((k, port))
    server.wait_for_termination()


class _Timed:
    """Wraps a transport: wall time and bytes of each PSI phase."""

    def __init__(self, inner: GrpcTransport) -> None:
        self.inner = inner
        self.seconds: dict[str, float] = {}
        self.bytes: dict[str, int] = {}

    def _time(self, phase: str, fn, *args, sent: int = 0):
        start = time.perf_counter()
        out = fn(*args)
        self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - start
        got = sum(len(v) for v in out.values()) * psi.POINT_BYTES if isinstance(out, dict) else 0
        self.bytes[phase] = self.bytes.get(phase, 0) + sent + got
        return out

    def psi_blind(self, split, session, blocks):
        return self._time("blind", self.inner.psi_blind, split, session, blocks)

    def psi_apply(self, calls):
        sent = sum(len(c.points) for c in calls.values()) * psi.POINT_BYTES
        return self._time("apply (K-1 steps)", self.inner.psi_apply, calls, sent=sent)

    def psi_keys(self, calls):
        sent = sum(len(c.points) for c in calls.values()) * psi.POINT_BYTES
        return self._time("keys", self.inner.psi_keys, calls, sent=sent)


def run(n: int, parties: int, overlap: float) -> dict[str, object]:
    from vfl_cli.certs_cmd import create_federation
    from vfl_coordinator import transport
    from vfl_core.training import party

    assert transport and party  # imported before the CPU count starts: not part of the PSI
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp:
        certs = Path(tmp)
        create_federation(certs, [f"party{k}" for k in range(parties)])
        ports: mp.Queue = ctx.Queue()
        procs = [
            ctx.Process(target=_serve, args=(k, n, parties, overlap, str(certs), ports))
            for k in range(parties)
        ]
        for p in procs:
            p.start()
        try:
            # start-up, not measured: 16 processes importing torch took over 300 s at load 35
            port_of = dict(ports.get(timeout=1800) for _ in procs)
            pids = [p.pid for p in procs if p.pid is not None]
            before = (_own_cpu(pids), _tree_cpu(pids))
            result = _align(n, parties, overlap, certs, port_of)
            after = (_own_cpu(pids), _tree_cpu(pids))
            result["CPU seconds"] = {
                "coordinator": after[0] - before[0],
                "parties": after[1] - before[1],
            }
            return result
        finally:
            for p in procs:
                p.kill()
                p.join()


def cpu_seconds(pids: list[int], children: bool = False) -> float:
    from benchmarks.procs import cpu_seconds as of

    return of(pids, children)


def _own_cpu(parties: list[int]) -> float:
    """CPU seconds of this process (the coordinator's side) and of its PSI workers: those
    reaped, and the live ones (the pool is kept for the process's life)."""
    own, reaped = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    workers = [c for c in _live_children(os.getpid()) if c not in parties]
    live = cpu_seconds(workers)
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime + live


def _tree_cpu(pids: list[int]) -> float:
    """CPU seconds of the parties, their reaped children and their live ones (PSI workers)."""
    live = [c for pid in pids for c in _live_children(pid)]
    return cpu_seconds(pids, children=True) + cpu_seconds(live)


def _live_children(pid: int) -> list[int]:
    """The live children of a process (Linux: /proc/PID/task/*/children)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def _align(n: int, parties: int, overlap: float, certs: Path, port_of: dict) -> dict[str, object]:
    from vfl_coordinator.config import Deadlines
    from vfl_coordinator.registry import Registry
    from vfl_coordinator.transport import GrpcTransport
    from vfl_core.data.party_dir import PartyData, PartyMeta, PartySplit
    from vfl_core.training.alignment import Alignment
    from vfl_core.training.party import party_info
    from vfl_wire.security import COORDINATOR, Security, load_identity

    registry = Registry(parties)
    for k in range(parties):
        ids = _ids(k, n, parties, overlap)
        meta = PartyMeta(
            dataset="synthetic", block=k, num_blocks=parties, kind="tabular",
            feature_shape=(1,), num_classes=2, has_labels=k == 0,
        )  # fmt: skip
        split = PartySplit(ids, np.zeros((len(ids), 1), np.float32), None)
        info = party_info(f"party{k}", PartyData(meta, {"train": split}))
        registry.register(info, f"127.0.0.1:{port_of[k]}")
    security = Security(load_identity(certs, COORDINATOR))
    transport = GrpcTransport(
        registry, "psi-bench", Deadlines(align=600.0), security.channel_credentials()
    )
    timed = _Timed(transport)
    try:
        start = time.perf_counter()
        keys = psi.psi_align(timed, "train", list(range(parties)))  # type: ignore[arg-type]
        total = time.perf_counter() - start
    finally:
        transport.close()
    private = Alignment.build(keys)
    plain = Alignment.build(
        {k: [i.encode() for i in _ids(k, n, parties, overlap)] for k in range(parties)}
    )
    # a party the PSI left out (it failed a step: on a loaded machine, a connection that timed
    # out) makes the two differ: reported as such, not compared
    left_out = sorted(set(plain.rows) - set(private.rows))
    same = not left_out and all(np.array_equal(private.rows[b], plain.rows[b]) for b in plain.rows)
    return {
        "ids per party": n,
        "parties": parties,
        "aligned samples": len(private),
        "observed patterns": len(private.patterns()),
        "same patterns as plain IDs": same
        if not left_out
        else f"not compared: left out {left_out}",
        "seconds": {**timed.seconds, "total": total},
        "MB on the wire": {k: v / 1e6 for k, v in timed.bytes.items()},
    }


def to_markdown(result: dict[str, object], command: str, header: bool = True) -> str:
    seconds = result["seconds"]
    mb = result["MB on the wire"]
    assert isinstance(seconds, dict) and isinstance(mb, dict)
    lines = [f"`{command}`", ""] if header else []
    lines += [
        f"- {result['parties']} parties x {result['ids per party']:,} IDs; "
        f"{result['aligned samples']:,} aligned samples in {result['observed patterns']} observed "
        f"patterns; same patterns as the plain IDs: {result['same patterns as plain IDs']}",
        "",
        "| phase | wall seconds | MB over the wire (both ways) |",
        "| --- | ---: | ---: |",
    ]
    for phase in ("blind", "apply (K-1 steps)", "keys"):
        lines.append(f"| {phase} | {seconds.get(phase, 0):.1f} | {mb.get(phase, 0):.1f} |")
    rest = seconds["total"] - sum(v for k, v in seconds.items() if k != "total")
    lines.append(f"| coordinator: its own secret, shuffles | {rest:.1f} | 0 |")
    lines.append(f"| **total** | **{seconds['total']:.1f}** | **{sum(mb.values()):.1f}** |")
    cpu = result.get("CPU seconds")
    if isinstance(cpu, dict):
        lines += [
            "",
            f"CPU seconds of the alignment: parties (with their workers) {cpu['parties']:.1f}, "
            f"coordinator (with its workers) {cpu['coordinator']:.1f}, together "
            f"{cpu['parties'] + cpu['coordinator']:.1f}.",
        ]
    return "\n".join(lines) + "\n"


def curve(results: list[dict[str, object]], load: list[float]) -> str:
    """Total time against IDs per party, one row per size."""
    lines = [
        "| IDs per party | aligned samples | wall seconds | s per 1 000 IDs | CPU seconds |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        total = r["seconds"]["total"]  # type: ignore[index]
        n = int(r["ids per party"])  # type: ignore[call-overload]
        cpu = sum(r.get("CPU seconds", {}).values())  # type: ignore[attr-defined]
        lines.append(
            f"| {n:,} | {r['aligned samples']:,} | {total:.1f} | {1000 * total / n:.2f} "
            f"| {cpu:.0f} |"
        )
    lines.append("")
    lines.append(f"1-minute load average {' / '.join(f'{x:.1f}' for x in load)} (start / end).")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.psi_cost", description=__doc__)
    parser.add_argument("--ids", default="100000", help="IDs per party; several: 10000,100000")
    parser.add_argument("--parties", type=int, default=4)
    parser.add_argument("--overlap", type=float, default=0.9)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    command = "python -m benchmarks.psi_cost " + " ".join(sys.argv[1:] if argv is None else argv)
    load = [os.getloadavg()[0]]
    results = []
    texts = [f"`{command}` (code {code_version()})", ""]
    for n in (int(x) for x in args.ids.split(",")):
        results.append(run(n, args.parties, args.overlap))
        texts.append(to_markdown(results[-1], command, header=False))
        print(texts[-1], flush=True)
        _append(args.out, texts)  # each size as it ends: a stopped curve keeps its sizes
        texts = []
    load.append(os.getloadavg()[0])
    texts.append(curve(results, load))
    print(texts[-1])
    _append(args.out, texts)
    return 0


def _append(out: Path | None, texts: list[str]) -> None:
    if out is not None:
        with out.open("a") as f:
            f.write("\n".join(texts) + "\n")


if __name__ == "__main__":
    sys.exit(main())
