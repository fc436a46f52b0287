"""Serving parties as real processes, for `vfl bench serve` and tests/test_serving_grpc.py.

`train_bundles` trains a LASER-VFL federation in process on the parties' tables and writes each
party's serving bundle; `ServingCluster` starts one `vfl-client --serve-bundle` process per party
(the label party last, as the gateway with a `--peer` per other party, optionally through a
shaping link per peer, benchmarks/netshape.py), reads their ports from their logs, and kills
every process it started (by its own process group) when it ends.

`vfl bench serve --gateways 1,2,4`: throughput with N gateway processes side by side (issue 46).

The gateway is a stateless replica: N `vfl-client --serve-bundle` gateway processes, each with
its own HTTP port, its own channels to the same three parties and its own copy of the bundle;
the callers spread over their ports round-robin (caller k asks gateway k mod N), as a load
balancer or a Kubernetes Service in front of N replicas would. Every party up, RTT 0. The counts
are measured in one run, interleaved (1, 2, 4 then 4, 2, 1, ... for `rounds`) so that a drift
in the machine's load falls on each count alike; per count: requests/s (median over rounds), its
ratio to one gateway, and the CPU time the gateway processes and the parties spent per request
(from /proc, what a busy machine changes least).

`vfl bench serve`'s reasons: the 429s by admission control's reason and the live parties
missing from answers by the reason each answer gave, per cell, and how a cell's callers
behaved (stamped deadline, Retry-After) in its mode column.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.serve_callers import Callers, Reply, post
from vfl_core.config import TrainConfig
from vfl_core.data.tabular import federation_sources, load_table_federation
from vfl_core.serving.bundle import write_bundle
from vfl_core.training.engine import Federation
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party

SECRET = "vfl-serving-secret"
START_TIMEOUT_S = 90.0
_GRPC_PORT = re.compile(r"listening on \S+ \(port (\d+)\)")
_HTTP_PORT = re.compile(r"over HTTPS? on \S+ \(port (\d+)\)")
_READY = re.compile(r"serves block (\d+) as")  # logged once loaded and warmed up


def train_bundles(
    tables: Sequence[Path],
    out: Path,
    *,
    id_column: str,
    label_column: str,
    task: str = "classification",
    config: TrainConfig | None = None,
) -> tuple[list[Path], Federation, dict[int, Party]]:
    """Train on `tables` (block k: the k-th; labels where the column is) in process, write
    out/party<k> bundles; returns them, the federation and its parties."""
    sources = federation_sources(
        list(tables),
        None,
        id_column=id_column,
        label_column=label_column,
        label_blocks=None,
        task=task,  # type: ignore[arg-type]
    )
    config = config or TrainConfig(epochs=2)
    parties = {
        d.meta.block: Party(f"party{d.meta.block}", d, config, secret=SECRET.encode())
        for d in load_table_federation(sources)
    }
    fed = Federation(InProcessTransport(parties), config, progress=False)
    fed.align()
    fed.train()
    choice = fed.serving_choice()  # the threshold and subsets chosen on validation
    dirs = [write_bundle(p, out / p.party_id, choice=choice) for _, p in sorted(parties.items())]
    return dirs, fed, parties


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen
    log: Path
    port: int = 0
    http_port: int = 0


@dataclass
class ServingCluster:
    """Start with `start(...)`; use as a context manager so every process dies at the end."""

    workdir: Path
    security: Sequence[str] = ("--insecure",)
    device: str = "cpu"  # every serving party's --device (cpu | cuda[:N])
    procs: dict[str, Proc] = field(default_factory=dict)

    def __enter__(self) -> ServingCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start_party(
        self,
        name: str,
        bundle: Path,
        table: Path | None,
        id_column: str,
        listen: str = "127.0.0.1:0",
        lookup: str | None = None,
    ) -> Proc:
        """A feature party serving `table`, or with `lookup` (module:function) its rows from
        that function instead."""
        args = self._args(name, bundle, table, id_column, listen)
        if lookup is not None:
            args += ["--lookup", lookup]
        return self._spawn(name, args)

    def start_gateway(
        self,
        name: str,
        bundle: Path,
        table: Path,
        id_column: str,
        peers: Sequence[str],
        extra: Sequence[str] = (),
        wait_ready: bool = True,
    ) -> Proc:
        """The gateway; returned once ready (warmed up), or with `wait_ready` False as soon
        as its HTTP port is open."""
        args = self._args(name, bundle, table, id_column)
        args += [a for p in peers for a in ("--peer", p)] + ["--http", "127.0.0.1:0", *extra]
        return self._spawn(name, args, http=True, wait_ready=wait_ready)

    def _args(
        self,
        name: str,
        bundle: Path,
        table: Path | None,
        id_column: str,
        listen: str = "127.0.0.1:0",
    ) -> list[str]:
        data = [] if table is None else ["--data", str(table), "--id-column", id_column]
        return [
            sys.executable, "-m", "vfl_cli.client_cmd", "--serve-bundle", str(bundle), *data,
            "--party-id", name, "--listen", listen, "--secret", SECRET,
            "--device", self.device, *self.security,
        ]  # fmt: skip

    def _spawn(
        self, name: str, argv: list[str], http: bool = False, wait_ready: bool = True
    ) -> Proc:
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = self.workdir / f"{name}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )  # fmt: skip
        proc = self.procs[name] = Proc(name, popen, log)
        proc.port = self._wait_for(proc, _GRPC_PORT)
        if http:
            proc.http_port = self._wait_for(proc, _HTTP_PORT)
        if wait_ready:
            self._wait_for(proc, _READY)
        return proc

    def _wait_for(self, proc: Proc, pattern: re.Pattern[str]) -> int:
        end = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < end:
            found = pattern.search(proc.log.read_text(errors="replace"))
            if found:
                return int(found.group(1))
            if proc.popen.poll() is not None:
                break
            time.sleep(0.1)
        tail = proc.log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{proc.name} did not start serving:\n{tail}")

    def signal(self, name: str, sig: signal.Signals) -> None:
        """Send `sig` to the process group of `name` (SIGKILL, SIGSTOP, SIGCONT)."""
        os.killpg(self.procs[name].popen.pid, sig)

    def close(self) -> None:
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.popen.pid, signal.SIGCONT)
                os.killpg(proc.popen.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(timeout=10)
        self.procs.clear()


# `vfl bench serve --gateways`: N gateway replicas side by side
_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ScaleCell:
    gateways: int
    callers: int
    round: int
    requests: int
    per_s: float
    p50_ms: float
    p99_ms: float
    answered_p99_ms: float
    shed: int
    failed: int
    gateway_cpu_ms: float  # the gateway processes' CPU time per request, together
    party_cpu_ms: float  # the three parties' CPU time per request, together


def start_replicas(
    cluster: ServingCluster,
    count: int,
    bundle: Path,
    table: Path,
    id_column: str,
    peers: Sequence[str],
    extra: Sequence[str],
) -> list[Proc]:
    """`count` more gateway processes (gw2, gw3, ...) on the same parties, each warmed."""
    replicas = []
    for k in range(2, 2 + count):
        proc = cluster.start_gateway(f"gw{k}", bundle, table, id_column, peers, extra)
        replicas.append(proc)
    return replicas


def warm(port: int, ids: list[str]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    for i in ids[:50]:
        post(conn, {"ids": [i]})
    conn.close()


def cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU time of the processes so far (Linux /proc)."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15 of stat
    return total * _TICK_S


def measure(
    callers_: Callers,
    gateways: Sequence[Proc],
    parties: Sequence[Proc],
    ids: list[str],
    counts: Sequence[int],
    callers: Sequence[int],
    seconds: float,
    rounds: int = 2,
) -> list[ScaleCell]:
    """Each count of gateways (the first N of `gateways`) under each number of callers, the
    counts in alternating order over `rounds`."""
    cells = []
    for n_callers in callers:
        for r in range(rounds):
            for n in counts if r % 2 == 0 else tuple(reversed(counts)):
                cells.append(_cell(callers_, gateways[:n], parties, ids, n_callers, seconds, r))
    return cells


def _cell(callers_, gateways, parties, ids, n_callers, seconds, round_) -> ScaleCell:
    gw_pids = [g.popen.pid for g in gateways]
    party_pids = [p.popen.pid for p in parties]
    gw_cpu, party_cpu = cpu_seconds(gw_pids), cpu_seconds(party_pids)
    replies = callers_.run([g.http_port for g in gateways], ids, seconds, n_callers)
    gw_cpu, party_cpu = cpu_seconds(gw_pids) - gw_cpu, cpu_seconds(party_pids) - party_cpu
    took = sorted(r.took for r in replies)
    answered = sorted(r.took for r in replies if r.status == 200)
    n = max(1, len(replies))
    return ScaleCell(
        gateways=len(gateways),
        callers=n_callers,
        round=round_,
        requests=len(replies),
        per_s=len(replies) / seconds,
        p50_ms=1000 * _q(took, 50),
        p99_ms=1000 * _q(took, 99),
        answered_p99_ms=1000 * _q(answered, 99) if answered else -1.0,
        shed=sum(1 for r in replies if r.status == 429),
        failed=sum(1 for r in replies if not r.ok and r.status != 429),
        gateway_cpu_ms=1000 * gw_cpu / n,
        party_cpu_ms=1000 * party_cpu / n,
    )


def _q(values: list[float], pct: int) -> float:
    if len(values) > 1:
        return statistics.quantiles(values, n=100, method="inclusive")[pct - 1]
    return values[0] if values else float("nan")


def report_lines(cells: list[dict], load: dict[str, object]) -> list[str]:
    """The scale-out table: per callers and gateway count, medians over the rounds."""
    if not cells:
        return []
    lines = [
        "",
        "## Gateway processes side by side (scale-out)",
        "",
        "N gateway processes, each its own HTTP port, channels and copy of the bundle, on the "
        "same three parties; caller k asks gateway k mod N over its keep-alive connection; "
        "every party up, RTT 0. The counts interleaved in one run (forward, then reversed); "
        "figures are medians over the rounds; ratio = req/s against one gateway; CPU ms per "
        "request from /proc (the gateways together, the three parties together). Load average "
        f"(1, 5, 15 min) before this part {_load(load['before'])}, after {_load(load['after'])}.",
        "",
        "| callers | gateways | rounds | req/s | ratio | p50 ms | p99 ms | answered p99 | shed "
        "| failed | gateway CPU ms/req | parties CPU ms/req |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    groups: dict[tuple[int, int], list[dict]] = {}
    for c in cells:
        groups.setdefault((c["callers"], c["gateways"]), []).append(c)
    for (n_callers, n), group in sorted(groups.items()):
        one = groups.get((n_callers, 1))
        per_s = statistics.median(c["per_s"] for c in group)
        ratio = per_s / statistics.median(c["per_s"] for c in one) if one else float("nan")

        def med(key: str, group: list[dict] = group) -> float:
            return statistics.median(c[key] for c in group)

        lines.append(
            f"| {n_callers} | {n} | {len(group)} | {per_s:.0f} | {ratio:.2f} | "
            f"{med('p50_ms'):.1f} | {med('p99_ms'):.1f} | {med('answered_p99_ms'):.1f} | "
            f"{sum(c['shed'] for c in group)} | {sum(c['failed'] for c in group)} | "
            f"{med('gateway_cpu_ms'):.2f} | {med('party_cpu_ms'):.2f} |"
        )
    return lines


def _load(values: object) -> str:
    return ", ".join(f"{x:.2f}" for x in values)  # type: ignore[union-attr]


# the reasons: 429s by admission control's reason, live parties missing by the answer's reason
def live_missing_why(replies: list[Reply], faulted: set[str]) -> dict[str, int]:
    """Why the live parties missing from answers were missing: reason -> how many."""
    why: dict[str, int] = {}
    for r in replies:
        for name, reason in zip(r.missing, r.why, strict=False):
            if r.ok and name not in faulted:
                why[reason] = why.get(reason, 0) + 1
    return why


def shed_why(replies: list[Reply]) -> dict[str, int]:
    """The 429s by admission control's reason (the text between "overloaded: " and "(")."""
    why: dict[str, int] = {}
    for r in replies:
        if r.status == 429:
            why[r.shed_reason] = why.get(r.shed_reason, 0) + 1
    return why


def why_table(cells: list[dict]) -> list[str]:
    """Each cell's 429s by admission control's reason, and why live parties were missing."""
    rows = [c for c in cells if c.get("shed_why") is not None]
    if not rows:
        return []

    def text(counts: dict[str, int]) -> str:
        return "; ".join(f"{k}: {n}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1]))

    lines = [
        "",
        "Why: the 429s by admission control's reason, and the live parties missing from "
        "answers by the reason the answer gave.",
        "",
        "| RTT ms | callers | mode | shed, by reason | live missing, by reason |",
        "| ---: | ---: | --- | --- | --- |",
    ]
    for c in rows:
        lines.append(
            f"| {c['rtt_ms']:g} | {c['callers']} | {mode_text(c)} | {text(c['shed_why']) or '-'} "
            f"| {text(c.get('live_missing_why') or {}) or '-'} |"
        )
    return lines


def mode_text(cell: dict) -> str:
    stamped = cell.get("stamped")
    out = cell["mode"] if stamped is None else f"{cell['mode']}, {'un' * (not stamped)}stamped"
    return out + (", Retry-After" if cell.get("honour_retry") else "")


# --- issue 46's acceptance lines, read from the cells (was its own module)
# Issue 46's acceptance lines for `vfl bench serve`, read from its cells, and the gateway's
# own count of the requests it shed (its Prometheus endpoint), to set beside the callers' 429s.
#
# - at MAX_CALLERS_SHED callers with a party frozen: p99 of the answered requests <= the
#   deadline + GRACE_MS, every other request shed with a 429 the gateway counted;
# - at <= MAX_CALLERS_LIVE callers: 0 answers missing a live party.

GRACE_MS = 15.0
MAX_CALLERS_SHED = 256
MAX_CALLERS_LIVE = 64
_SHED = re.compile(r"^vfl_serving_shed_total\{([^}]*)\}\s+([0-9.e+]+)$", re.MULTILINE)


def shed_counted(port: int) -> float:
    """The gateway's `vfl_serving_shed_total` over HTTP, every reason together."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    return sum(float(v) for labels, v in _SHED.findall(text) if 'transport="http"' in labels)


def late_answers(replies: list[Any], deadline_ms: float) -> dict[str, object]:
    """The answers (200) the callers had later than the deadline + GRACE_MS, and the mean ms
    of them after the gateway's last deadline check (`after`: the reply's way back)."""
    late = [r for r in replies if r.status == 200 and 1000 * r.took > deadline_ms + GRACE_MS]
    after = [1000 * r.steps["after"] for r in late if "after" in r.steps]
    return {"late_answers": len(late), "late_after_ms": statistics.fmean(after) if after else -1.0}


def acceptance_lines(cells: list[dict], deadline_ms: float) -> list[str]:
    """One line per acceptance clause and cell it applies to, each met or not, as measured."""
    lines = ["", "Issue 46's acceptance, as measured in this run:", ""]
    bound = deadline_ms + GRACE_MS
    for c in cells:
        if c["mode"] != "stop" or c["callers"] != MAX_CALLERS_SHED:
            continue
        answered = c["requests"] - c.get("shed", 0) - c["failed"]
        p99 = c.get("answered_p99_ms", -1.0)
        counted = c.get("shed_counted")
        held = p99 <= bound if answered else True
        others = c["failed"] == 0 and (counted is None or counted == c.get("shed", 0))
        lines.append(
            f"- {_cell_name(c)}: answered p99 {_ms(p99)} ms against {bound:g} "
            f"({_verdict(held, answered)}; {answered} answered); every other request a "
            f"429: {c.get('shed', 0)} shed, {c['failed']} failed, the gateway counted "
            f"{'-' if counted is None else f'{counted:.0f}'} ({'met' if others else 'NOT met'})."
            + _late_text(c)
        )
    live = [c for c in cells if c["callers"] <= MAX_CALLERS_LIVE]
    if live:
        missing = sum(c.get("live_missing", 0) for c in live)
        answers = sum(c["requests"] - c.get("shed", 0) - c["failed"] for c in live)
        lines.append(
            f"- <= {MAX_CALLERS_LIVE} callers ({len(live)} cells, {answers} answers): "
            f"{missing} answers missing a live party ({'met' if missing == 0 else 'NOT met'})."
        )
    return lines if len(lines) > 3 else []


def _verdict(held: bool, answered: int) -> str:
    if not answered:
        return "nothing answered: met only vacuously"
    return "met" if held else "NOT met"


def _late_text(cell: dict) -> str:
    late = cell.get("late_answers", 0)
    if not late:
        return ""
    return (
        f" {late} answers reached their caller past the bound, on average "
        f"{_ms(cell.get('late_after_ms', -1.0))} ms of their time after the gateway's last "
        "deadline check on them."
    )


def _cell_name(cell: dict) -> str:
    stamped = "stamped" if cell.get("stamped") else "unstamped"
    retry = ", callers honouring Retry-After" if cell.get("honour_retry") else ""
    return f"{cell['callers']} callers, party3 frozen, {stamped}{retry}"


def _ms(value: float) -> str:
    return "-" if value < 0 else f"{value:.1f}"
