"""The WAN benchmark's shaping proxy (benchmarks/netshape.py) with real sockets on 127.0.0.1:
delay, bandwidth, jitter without reordering, reshaping, and a clean shutdown. Lower bounds are
exact (the proxy never delivers early); upper bounds leave room for a loaded machine."""

from __future__ import annotations

import contextlib
import socket
import socketserver
import struct
import threading
import time
from collections.abc import Iterator

import pytest

from benchmarks.netshape import NetShaper, Pipe, Shape

SLACK_S = 0.5  # scheduling noise allowed above a bound on a shared 2-core machine


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


class _Sink(socketserver.BaseRequestHandler):
    """Reads to EOF and records (monotonic time, bytes) of every recv."""

    def handle(self) -> None:
        server = self.server
        while data := self.request.recv(65536):
            server.received.append((time.monotonic(), data))  # type: ignore[attr-defined]


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    yield from _serve(_Echo)


@pytest.fixture
def sink() -> Iterator[socketserver.ThreadingTCPServer]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Sink)
    server.daemon_threads = True
    server.received = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _serve(handler: type[socketserver.BaseRequestHandler]) -> Iterator[tuple[str, int]]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[0], server.server_address[1]
    server.shutdown()
    server.server_close()


def _round_trip(sock: socket.socket, payload: bytes) -> float:
    start = time.monotonic()
    sock.sendall(payload)
    got = b""
    while len(got) < len(payload):
        chunk = sock.recv(65536)
        assert chunk, "connection closed"
        got += chunk
    assert got == payload
    return time.monotonic() - start


# ------------------------------------------------------------------------ the arithmetic


def test_given_a_bandwidth_when_chunks_are_scheduled_then_each_waits_for_the_wire() -> None:
    pipe = Pipe(Shape(delay_s=0.010, bits_per_s=8e6), seed=0)  # 1 MB/s
    assert pipe.schedule(0.0, 1000) == pytest.approx((0.001, 0.011))
    # sent at once behind the first: leaves when the wire is free again
    assert pipe.schedule(0.0, 1000) == pytest.approx((0.002, 0.012))
    # after an idle gap the wire is free at once
    assert pipe.schedule(1.0, 1000) == pytest.approx((1.001, 1.011))
    assert pipe.bytes == 3000


def test_given_jitter_when_chunks_are_scheduled_then_arrivals_vary_but_never_reorder() -> None:
    pipe = Pipe(Shape(delay_s=0.020, jitter_s=0.015), seed=3)
    arrivals = [pipe.schedule(i * 0.001, 10)[1] for i in range(200)]
    assert arrivals == sorted(arrivals)
    latencies = [a - i * 0.001 for i, a in enumerate(arrivals)]
    assert min(latencies) >= 0.005 - 1e-12
    assert max(latencies) > min(latencies) + 0.010


# ------------------------------------------------------------------------ real sockets


def test_given_a_delay_when_a_message_is_echoed_then_the_round_trip_takes_twice_the_delay(
    echo: tuple[str, int],
) -> None:
    with NetShaper() as net:
        link = net.link(Shape(delay_s=0.040))
        port = net.listen(link, echo)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            rtts = [_round_trip(sock, b"ping %d" % i) for i in range(3)]
            net.set_shape(Shape())
            time.sleep(0.1)  # the reshape is applied on the proxy's loop
            fast = min(_round_trip(sock, b"pong %d" % i) for i in range(3))
    assert min(rtts) >= 0.080
    assert max(rtts) < 0.080 + SLACK_S
    assert fast < 0.040  # reshaped to no delay: well under one delayed direction
    assert sum(p.bytes for p in link.pipes) == 2 * sum(len(b"ping 0") for _ in range(6))


def test_given_a_bandwidth_when_bytes_are_sent_then_they_take_size_over_rate(
    sink: socketserver.ThreadingTCPServer,
) -> None:
    payload = bytes(range(256)) * 1200  # 307 200 bytes
    with NetShaper() as net:
        link = net.link(Shape(bits_per_s=8e6))  # 1 MB/s: 0.307 s
        port = net.listen(link, sink.server_address)
        start = time.monotonic()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)
            assert sock.recv(1) == b""  # the sink closed after EOF: everything arrived
        received = sink.received  # type: ignore[attr-defined]
        assert b"".join(d for _, d in received) == payload
        elapsed = received[-1][0] - start
    assert elapsed >= len(payload) * 8 / 8e6
    assert elapsed < len(payload) * 8 / 8e6 + SLACK_S
    assert link.pipes[0].bytes == len(payload) and link.pipes[1].bytes == 0


def test_given_jitter_when_messages_stream_through_then_they_arrive_in_order_with_varied_delay(
    sink: socketserver.ThreadingTCPServer,
) -> None:
    count, spacing = 30, 0.010
    with NetShaper() as net:
        link = net.link(Shape(delay_s=0.030, jitter_s=0.020), seed=1)
        port = net.listen(link, sink.server_address)
        sent = []
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for i in range(count):
                sent.append(time.monotonic())
                sock.sendall(struct.pack("<I", i))
                time.sleep(spacing)
            sock.shutdown(socket.SHUT_WR)
            assert sock.recv(1) == b""
    received = sink.received  # type: ignore[attr-defined]
    stream = b"".join(d for _, d in received)
    assert [struct.unpack_from("<I", stream, 4 * i)[0] for i in range(count)] == list(range(count))
    arrival = {}  # message -> when its last byte arrived
    offset = 0
    for when, data in received:
        offset += len(data)
        for i in range(offset // 4):
            arrival.setdefault(i, when)
    latencies = [arrival[i] - sent[i] for i in range(count)]
    assert min(latencies) >= 0.010  # delay - jitter
    assert max(latencies) < 0.050 + SLACK_S
    assert max(latencies) - min(latencies) > 0.010  # the jitter shows


def test_given_open_connections_when_the_shaper_closes_then_everything_is_cut_and_released(
    echo: tuple[str, int],
) -> None:
    net = NetShaper()
    with net:
        link = net.link(Shape(delay_s=0.005))
        port = net.listen(link, echo)
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        _round_trip(sock, b"hello")
    with sock:
        sock.settimeout(5)
        with contextlib.suppress(ConnectionResetError):  # a reset is a clean cut too
            assert sock.recv(1) == b""
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    assert not any(t.name == "netshape" for t in threading.enumerate())


def test_given_no_upstream_when_a_client_connects_then_it_is_closed_not_left_hanging() -> None:
    with socket.socket() as s:  # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()
    with NetShaper() as net:
        port = net.listen(net.link(Shape()), dead)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.settimeout(5)
            with contextlib.suppress(ConnectionResetError):
                assert sock.recv(1) == b""
