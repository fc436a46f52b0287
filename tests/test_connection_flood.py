"""Raw-socket connection floods against the gRPC servers.

Anyone who reaches a port can open TCP connections before any TLS or token check, and each one
holds a file descriptor of the server's process. A server closes a connection that has not
finished its handshake within `HANDSHAKE_TIMEOUT_MS` and lifts its soft limit on open files to
the hard one (vfl_wire/channels.py); these tests flood a real coordinator started with Docker's
default soft limit and check that the federation still trains. A connection holds at most
`MAX_STREAMS_PER_CONNECTION` streams, which also turns on grpc's defence against rapid reset:
a real coordinator attacked that way keeps answering. A connection that pings more than once a
second while the server sends nothing is closed (a ping flood costs the attacker a connection).
"""

from __future__ import annotations

import contextlib
import resource
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from harness import Cluster, prepare_digits
from slowloris import END_HEADERS, GOAWAY, HEADERS, PING, RapidReset, _frame, _literal, frames

from vfl_wire import channels, convert
from vfl_wire.v1 import vfl_pb2, vfl_pb2_grpc

EMPTY_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # length 0, type 4, no flags, stream 0
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + EMPTY_SETTINGS
IDLE, TALKING = 900, 300  # connections that never speak, and ones that sent the HTTP/2 preface
HANDSHAKE_S = channels.HANDSHAKE_TIMEOUT_MS / 1000
ENHANCE_YOUR_CALM = b"\x00\x00\x00\x0b"  # the HTTP/2 error code of a GOAWAY for abuse
CONTINUATION, END_STREAM = 0x9, 0x1


def _own_limit(needed: int) -> None:
    """This test process must hold the attacker's sockets itself."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < needed:
        pytest.skip(f"the hard open-file limit {hard} is below the {needed} sockets needed")
    if soft != resource.RLIM_INFINITY and soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


@contextlib.contextmanager
def _flood(port: int, idle: int, talking: int) -> Iterator[list[socket.socket]]:
    sockets: list[socket.socket] = []
    try:
        for i in range(idle + talking):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            if i >= idle:
                s.sendall(PREFACE)
            sockets.append(s)
        yield sockets
    finally:
        for s in sockets:
            s.close()


def _closed_by_peer(s: socket.socket) -> bool:
    s.setblocking(False)
    try:
        while data := s.recv(65536):  # drain whatever the server sent (SETTINGS, pings)
            del data
        return True  # b"": the server closed it
    except BlockingIOError:
        return False
    except OSError:
        return True  # reset


def test_given_low_soft_limit_when_server_made_then_raised_to_hard_or_warned() -> None:
    code = textwrap.dedent(
        """
        import logging, resource, sys
        logging.basicConfig(level=logging.WARNING, format="%(message)s")
        resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), int(sys.argv[2])))
        from vfl_wire.channels import make_server
        make_server(1)
        print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        """
    )

    def run(soft: int, hard: int) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-c", code, str(soft), str(hard)]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True)

    raised = run(128, 8192)
    assert raised.stdout.split() == ["8192"] and "open files" not in raised.stderr
    capped = run(256, 256)  # the operator's hard limit is the ceiling: kept, and said
    assert capped.stdout.split() == ["256"]
    assert "may hold only 256 open files" in capped.stderr and "ulimit -Hn" in capped.stderr


def test_given_connection_silent_past_handshake_timeout_then_closed_and_server_answers() -> None:
    server = channels.make_server(2, handshake_timeout_ms=500)
    vfl_pb2_grpc.add_CoordinatorServicer_to_server(vfl_pb2_grpc.CoordinatorServicer(), server)
    port = channels.bind(server, "127.0.0.1:0")
    server.start()
    try:
        with socket.create_connection(("127.0.0.1", port)) as silent:
            silent.settimeout(10)
            start = time.monotonic()
            while silent.recv(65536):  # the server's SETTINGS, then its close (or our timeout)
                pass
            assert 0.4 < time.monotonic() - start < 9
        with channels.make_channel(f"127.0.0.1:{port}") as channel:
            request = vfl_pb2.StatusRequest(header=convert.header("", "x"))
            with pytest.raises(grpc.RpcError) as info:
                vfl_pb2_grpc.CoordinatorStub(channel).Status(request, timeout=10)
            assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED  # reached the server
    finally:
        server.stop(grace=None)


def test_server_options_bound_the_handshake() -> None:
    options = dict(channels.server_options())
    assert options["grpc.server_handshake_timeout_ms"] == channels.HANDSHAKE_TIMEOUT_MS <= 10_000
    assert options["grpc.max_concurrent_streams"] == channels.MAX_STREAMS_PER_CONNECTION <= 1024


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs util-linux prlimit")
def test_given_flooded_coordinator_with_docker_default_limit_then_parties_train_and_finish(
    cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> None:
    _own_limit(IDLE + TALKING + 256)
    parties = prepare_digits(tmp_path_factory.getbasetemp(), p_miss=0.1, seed=0, clients=2)
    # Docker's default: soft 1024 (128 here, so a smaller flood shows it), a larger hard limit
    coord = cluster.coordinator(
        clients=2, epochs=1, serve=True, wrap=["prlimit", "--nofile=128:4096", "--"]
    )
    port = coord.port()
    limits = Path(f"/proc/{coord.pid}/limits").read_text()
    assert any(
        line.split()[3:5] == ["4096", "4096"]
        for line in limits.splitlines()
        if line.startswith("Max open files")
    ), limits

    with _flood(port, IDLE, TALKING) as sockets:
        flooded = time.monotonic()
        clients = [cluster.client(coord, d) for d in parties]
        stub, header = cluster.stub(coord), convert.header("", "operator")

        def serving() -> bool:
            reply = stub.Status(vfl_pb2.StatusRequest(header=header), timeout=10)
            return reply.state == "serving" and time.monotonic() - flooded > HANDSHAKE_S + 2

        cluster.wait_for(serving, 180, "training to end under the flood")
        results = coord.results()
        assert results is not None and results["status"] == "ok", cluster.describe()
        assert results["test"] is not None and all(c.alive() for c in clients)
        # the silent connections were dropped at the handshake timeout, by a live coordinator
        assert all(_closed_by_peer(s) for s in sockets[:IDLE]) and coord.alive()
        reply = stub.Evaluate(vfl_pb2.EvaluateRequest(header=header, split="test"), timeout=60)
        assert list(reply.live_blocks) == [0, 1]


@pytest.mark.slow
@pytest.mark.alone  # the attacker takes both cores for seconds
def test_given_rapid_reset_attack_when_operator_asks_then_coordinator_answers(
    cluster: Cluster,
) -> None:
    coord = cluster.coordinator(clients=2)
    stub, header = cluster.stub(coord), convert.header("", "operator")

    def status() -> str:
        return stub.Status(vfl_pb2.StatusRequest(header=header), timeout=5).state

    assert status() == "registering"
    with RapidReset(coord.port(), "/vfl.v1.Coordinator/Status", connections=2) as attack:
        time.sleep(1.0)
        # before the stream limit, every one of these failed (CANCELLED) while the attack ran
        answers = [status() for _ in range(5)]
        sent = attack.sent
    assert answers == ["registering"] * 5
    assert sent > 20_000, sent  # the attack ran at full speed meanwhile
    assert status() == "registering" and coord.alive()


@pytest.mark.slow
def test_given_ping_flood_when_sent_then_connection_closed_and_coordinator_answers(
    cluster: Cluster,
) -> None:
    """Every PING is answered: a flood of them once kept a coordinator's core busy answering
    (87 million in 8 s on four connections, 10 CPU s, 570 MB resident) for as long as it went on.
    """
    coord = cluster.coordinator(clients=2)
    stub, header = cluster.stub(coord), convert.header("", "operator")
    received, sent = b"", 0
    with socket.create_connection(("127.0.0.1", coord.port()), timeout=10) as sock:
        sock.sendall(PREFACE)
        give_up = time.monotonic() + 10
        with contextlib.suppress(OSError):  # the server closed the connection under our writes
            while time.monotonic() < give_up:
                sock.sendall(_frame(PING, 0, 0, b"pingpong") * 10)
                sent += 10
                chunk = sock.recv(1 << 16)
                if not chunk:
                    break
                received += chunk
    goaway = [payload for kind, payload in frames(received) if kind == GOAWAY]
    assert goaway, f"not closed after {sent} pings"
    assert goaway[0][4:8] == ENHANCE_YOUR_CALM and b"too_many_pings" in goaway[0][8:]
    assert sent < 1000
    assert stub.Status(vfl_pb2.StatusRequest(header=header), timeout=5).state == "registering"


def _grpc_status(received: bytes) -> int | None:
    """The grpc-status of the first trailers in `received` (grpc writes it as a plain literal)."""
    for kind, payload in frames(received):
        at = payload.find(b"grpc-status") if kind == HEADERS else -1
        if at >= 0:
            size = payload[at + len(b"grpc-status")]
            return int(payload[at + len(b"grpc-status") + 1 : at + len(b"grpc-status") + 1 + size])
    return None


@pytest.mark.slow
@pytest.mark.parametrize(("frames_sent", "statuses"), [(40, {3, 8}), (250, {8})])
def test_given_header_block_of_many_tiny_entries_then_refused_and_coordinator_answers(
    cluster: Cluster, frames_sent: int, statuses: set[int]
) -> None:
    """grpc hands a request's headers to Python as tuples before any code of ours runs, often
    however many there are: 40 CONTINUATION frames of 4-byte entries (163,840 of them) mostly
    reach the guard, which refuses the bodiless call (INVALID_ARGUMENT), and are otherwise
    refused by grpc's random early rejection (RESOURCE_EXHAUSTED: one in eight by hand, and the
    one a loaded CI run sent); 250 (a million) grpc always refuses. The CPU each costs the
    server (halved by channels.freeze_heap) is measured in the README ("Header floods"), not
    asserted here."""
    coord = cluster.coordinator(clients=2)
    stub, header = cluster.stub(coord), convert.header("", "operator")
    request = b"".join(
        _literal(name, value)
        for name, value in [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", "/vfl.v1.Coordinator/Status"),
            (":authority", "x"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ]
    )
    entries = b"\x00\x01a\x00" * 4096  # literal, not indexed: name "a", empty value
    received = b""
    with socket.create_connection(("127.0.0.1", coord.port()), timeout=10) as sock:
        sock.sendall(PREFACE + _frame(HEADERS, END_STREAM, 1, request))
        for i in range(frames_sent):
            sock.sendall(
                _frame(CONTINUATION, END_HEADERS if i == frames_sent - 1 else 0, 1, entries)
            )
        give_up = time.monotonic() + 30
        while _grpc_status(received) is None and time.monotonic() < give_up:
            chunk = sock.recv(1 << 16)
            if not chunk:
                break
            received += chunk
    assert _grpc_status(received) in statuses
    assert stub.Status(vfl_pb2.StatusRequest(header=header), timeout=5).state == "registering"
    assert coord.alive()
