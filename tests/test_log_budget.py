"""The log lines peers cause are budgeted (vfl_wire/log_budget.py): a flood of refused requests
writes a few lines and a count, not a line each."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import grpc
import pytest
from harness import Cluster

from vfl_wire import convert, security, status
from vfl_wire.log_budget import LINES, LineBudget
from vfl_wire.v1 import vfl_pb2


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _records(budget: LineBudget, msg: str, n: int) -> list[logging.LogRecord]:
    made = [
        logging.LogRecord("x", logging.WARNING, "f", 1, msg, ("Embed", "why"), None)
        for _ in range(n)
    ]
    return [r for r in made if budget.filter(r)]


def test_given_a_flood_of_one_kind_when_logged_then_a_few_lines_then_a_count() -> None:
    clock = Clock()
    budget = LineBudget(lines=3, window_s=10.0, clock=clock)
    assert len(_records(budget, "%s refused: %s", 50)) == 3
    assert len(_records(budget, "%s: malformed request", 2)) == 2  # another kind has its own
    clock.now = 10.0
    passed = _records(budget, "%s refused: %s", 5)
    assert len(passed) == 3
    assert passed[0].getMessage() == (
        "Embed refused: why (47 more like it not logged before this one)"
    )
    assert passed[1].getMessage() == "Embed refused: why"


def test_servers_refusal_loggers_carry_a_budget() -> None:
    for logger in (status.log, security.log):
        assert any(isinstance(f, LineBudget) for f in logger.filters)


@pytest.mark.slow
def test_given_a_flood_of_malformed_requests_when_served_then_the_log_holds_a_few_lines(
    cluster: Cluster,
) -> None:
    """A real coordinator sent 400 undecodable requests: it refuses each, and logs LINES."""
    coord = cluster.coordinator(clients=2)
    register = cluster.channel(coord.address).unary_unary("/vfl.v1.Coordinator/Register")
    for _ in range(400):
        with pytest.raises(grpc.RpcError) as refused:
            register(b"\xff\xff\xff", timeout=10)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    lines = [line for line in coord.log().splitlines() if "malformed request" in line]
    assert len(lines) == LINES
    stub, header = cluster.stub(coord), convert.header("", "operator")
    assert stub.Status(vfl_pb2.StatusRequest(header=header), timeout=5).state == "registering"


_HANDSHAKE_FLOOD = """
import socket, sys
from pathlib import Path
import vfl_cli  # what every command imports first
from vfl_cli.certs_cmd import create_federation
from vfl_wire.channels import make_server, start_with_health
from vfl_wire.security import load_security

certs = Path(sys.argv[1])
create_federation(certs, ["party0"])
server = make_server(2, [])
credentials = load_security(certs, False, "party0").server_credentials()
port = start_with_health(server, "127.0.0.1:0", credentials)
for _ in range(20):
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"\\x00" * 64)  # not TLS: the handshake fails
        s.recv(10)
server.stop(0).wait()
"""


@pytest.mark.parametrize(("verbosity", "lines"), [(None, 0), ("INFO", 20)])
def test_given_connections_failing_the_tls_handshake_then_no_line_each_unless_asked(
    tmp_path, verbosity: str | None, lines: int
) -> None:
    """grpc writes a line per failed handshake (11 MB in 8 s of garbage connections):
    the commands keep grpc to its errors, and an operator's GRPC_VERBOSITY still wins."""
    env = {k: v for k, v in os.environ.items() if k != "GRPC_VERBOSITY"}
    if verbosity is not None:
        env["GRPC_VERBOSITY"] = verbosity
    done = subprocess.run(
        [sys.executable, "-c", _HANDSHAKE_FLOOD, str(tmp_path / "certs")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.count("Handshake failed") == lines, done.stderr[-2000:]
