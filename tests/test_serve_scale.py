"""`vfl bench serve --gateways`: the callers spread over gateway replicas, and the scale-out table
(medians over the rounds, the ratio to one gateway)."""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from benchmarks.serve.cluster import acceptance_lines, cpu_seconds, report_lines
from benchmarks.serve_callers import load


class _Answer(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the gateway

    def do_POST(self) -> None:
        ids = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["ids"]
        self.server.connections[self.client_address] += 1  # type: ignore[attr-defined]
        body = json.dumps({"predictions": [{"id": i, "parties": ["party0"]} for i in ids]})
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def servers():
    started = []
    for _ in range(2):
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Answer)
        server.daemon_threads = True
        server.connections = Counter()  # type: ignore[attr-defined]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        started.append(server)
    yield started
    for server in started:
        server.shutdown()
        server.server_close()


def test_given_two_ports_when_four_callers_load_then_each_port_gets_two_callers(servers) -> None:
    ports = [s.server_address[1] for s in servers]
    start = time.monotonic()
    replies = load(ports, ["a", "b"], start, start + 0.3, callers=4, first=0, every=1)
    assert replies and all(r.ok for r in replies)
    for server in servers:  # one keep-alive connection per caller, callers k and k + 2 here
        assert len(server.connections) == 2
    assert sum(sum(s.connections.values()) for s in servers) == len(replies)


def _cell(gateways: int, round_: int, per_s: float) -> dict[str, float]:
    return {
        "gateways": gateways, "callers": 64, "round": round_, "requests": int(3 * per_s),
        "per_s": per_s, "p50_ms": 10.0, "p99_ms": 50.0, "answered_p99_ms": 40.0, "shed": 1,
        "failed": 0, "gateway_cpu_ms": 0.5, "party_cpu_ms": 0.25,
    }  # fmt: skip


def test_given_rounds_when_reported_then_median_per_count_and_ratio_to_one() -> None:
    cells = [_cell(1, 0, 100), _cell(2, 0, 150), _cell(2, 1, 170), _cell(1, 1, 120)]
    cells += [_cell(1, 2, 110)]
    rows = [
        r
        for r in report_lines(cells, {"before": (1, 2, 3), "after": (1, 2, 3)})
        if r[:5] == "| 64 "
    ]
    assert [r.split(" | ")[1:5] for r in rows] == [
        ["1", "3", "110", "1.00"],
        ["2", "2", "160", "1.45"],
    ]
    assert rows[0].split(" | ")[8] == "3"  # shed summed over the rounds


def test_given_this_process_when_cpu_read_then_it_grows_with_work() -> None:
    before = cpu_seconds([os.getpid()])
    end = time.process_time() + 0.05
    while time.process_time() < end:
        pass
    assert cpu_seconds([os.getpid()]) > before


def test_given_cells_when_acceptance_is_read_then_each_clause_met_or_not_as_measured() -> None:
    """Issue 46's acceptance lines of `vfl bench serve`: the 256-caller frozen cells' answered
    p99 against deadline + 15 ms and their 429s against the gateway's own count; the live
    parties missing at <= 64 callers."""
    frozen = {"mode": "stop", "callers": 256, "requests": 100, "failed": 0, "stamped": True}
    cells = [
        frozen | {"shed": 90, "answered_p99_ms": 110.2, "shed_counted": 90.0},
        frozen
        | {
            "shed": 95,
            "answered_p99_ms": 130.0,
            "shed_counted": 94.0,
            "late_answers": 2,
            "late_after_ms": 33.0,
        },
        frozen | {"shed": 100, "answered_p99_ms": -1.0, "shed_counted": 100.0},
        {"mode": "up", "callers": 64, "requests": 50, "shed": 0, "failed": 0, "live_missing": 0},
        {"mode": "stop", "callers": 8, "requests": 50, "shed": 5, "failed": 0, "live_missing": 1},
    ]
    lines = [line for line in acceptance_lines(cells, 100.0) if line.startswith("- ")]
    assert len(lines) == 4
    assert "110.2 ms against 115 (met; 10 answered)" in lines[0] and "counted 90 (met)" in lines[0]
    assert "130.0 ms against 115 (NOT met" in lines[1] and "counted 94 (NOT met)" in lines[1]
    assert "2 answers reached their caller past the bound" in lines[1] and "33.0 ms" in lines[1]
    assert "nothing answered: met only vacuously" in lines[2]
    assert lines[3] == (
        "- <= 64 callers (2 cells, 95 answers): 1 answers missing a live party (NOT met)."
    )
