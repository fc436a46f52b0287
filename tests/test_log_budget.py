"""The log lines peers cause are budgeted (vfl_wire/log_budget.py): a flood of refused requests
writes a few lines and a count, not a line each."""

from __future__ import annotations

import logging

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
