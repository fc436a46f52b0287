"""`vfl bench serve --gateways 1,2,4`: throughput with N gateway processes side by side (issue 46).

The gateway is a stateless replica: N `vfl-client --serve-bundle` gateway processes, each with
its own HTTP port, its own channels to the same three parties and its own copy of the bundle;
the callers spread over their ports round-robin (caller k asks gateway k mod N), as a load
balancer or a Kubernetes Service in front of N replicas would. Every party up, RTT 0. The counts
are measured in one run, interleaved (1, 2, 4 then 4, 2, 1, ... for `rounds`) so that a drift
in the machine's load falls on each count alike; per count: requests/s (median over rounds), its
ratio to one gateway, and the CPU time the gateway processes and the parties spent per request
(from /proc, what a busy machine changes least)."""

from __future__ import annotations

import http.client
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.serve.cluster import Proc, ServingCluster
from benchmarks.serve_callers import Callers, post

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
