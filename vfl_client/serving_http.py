"""The gateway's HTTP endpoint: the ASGI app of vfl_client.serving_app served by uvicorn with
h11, on one thread of its own (an asyncio event loop: an open connection costs no thread).

    curl -s localhost:8080/predict -d '{"ids": ["C00017"], "deadline_ms": 100}'

Why uvicorn and h11 rather than a hand-written `http.server`: h11 parses HTTP/1.1 strictly and
refuses what request smuggling needs (a request with both Content-Length and
Transfer-Encoding, two Content-Lengths, malformed chunks: a 400 and the connection closed), and
the connection handling is maintained elsewhere. What uvicorn leaves to its user is added here
(`_Protocol`, `ConnectionGuard`):

- a request head (its line and headers) must be complete within HEAD_TIMEOUT_S of the
  connection opening or of its previous reply (uvicorn's keep-alive timer restarts on every
  byte, so one header a second held a connection forever); the connection is closed otherwise;
- at most MAX_PER_CLIENT connections per client address and MAX_CONNECTIONS in all: beyond,
  the longest-idle connection (no request in flight) of that client, or of all, is closed, so
  that idle or slow callers cannot lock a new caller out (with a thread per connection, 512
  idle connections once did, for 29 s);
- with TLS, the name of the certificate a caller presented, for vfl_client.serving_auth.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import resource
import socket
import ssl
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from vfl_client.serving_app import READ_AT, ServingApp
from vfl_core.errors import DataError
from vfl_wire.log_budget import budget

log = logging.getLogger(__name__)

HEAD_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 4096
MAX_PER_CLIENT = 256
MAX_HEAD_BYTES = 16 * 1024  # a request line and headers larger than this: 400
BACKLOG = 1024
START_TIMEOUT_S = 30.0
BAD_REQUEST = "malformed HTTP request (or ambiguous body framing)"


class ConnectionGuard:
    """The open connections of one endpoint, by client address and by idleness (used on the
    event loop's thread only)."""

    def __init__(self, max_total: int = MAX_CONNECTIONS, per_client: int = MAX_PER_CLIENT) -> None:
        self.max_total = max_total
        self.per_client = per_client
        self.evicted = 0  # connections closed to make room
        self._idle: dict[_Protocol, float] = {}  # in the order they became idle
        self._clients: dict[str, set[_Protocol]] = defaultdict(set)
        self._open = 0
        self.names: dict[tuple[str, int], str | None] = {}  # (host, port) -> certificate name

    def opened(self, conn: _Protocol) -> None:
        self._open += 1
        self._clients[conn.host].add(conn)
        self._idle[conn] = time.monotonic()
        if len(self._clients[conn.host]) > self.per_client:
            self._evict(conn, lambda c: c.host == conn.host)
        if self._open > self.max_total:
            self._evict(conn, lambda c: True)

    def busy(self, conn: _Protocol) -> None:
        self._idle.pop(conn, None)

    def idle(self, conn: _Protocol) -> None:
        self._idle.pop(conn, None)
        self._idle[conn] = time.monotonic()

    def closed(self, conn: _Protocol) -> None:
        if conn in self._clients.get(conn.host, ()):
            self._open -= 1
            self._clients[conn.host].discard(conn)
            if not self._clients[conn.host]:
                del self._clients[conn.host]
        self._idle.pop(conn, None)
        self.names.pop(conn.address, None)

    def _evict(self, new: _Protocol, which: Any) -> None:
        victim = next((c for c in self._idle if c is not new and which(c)), None)
        if victim is None:  # every other one has a request in flight: refuse the new one
            victim = new
        self.evicted += 1
        log.debug("HTTP: closing an idle connection of %s to make room", victim.host)
        self.closed(victim)
        victim.transport.close()


class _Protocol(H11Protocol):
    """uvicorn's h11 protocol with a request-head timeout and the connection guard."""

    guard: ConnectionGuard  # set on the subclass made for each endpoint

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        peer = transport.get_extra_info("peername") or ("?", 0)
        self.host, self.address = str(peer[0]), (str(peer[0]), int(peer[1]))
        self.guard.names[self.address] = _certificate_name(transport.get_extra_info("peercert"))
        self._cycle_seen: Any = None
        self._head_timer: asyncio.TimerHandle | None = None
        self.guard.opened(self)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.guard.closed(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        read_at = time.monotonic()
        super().data_received(data)
        self._check_started(read_at)

    def on_response_complete(self) -> None:
        super().on_response_complete()  # may start a pipelined request
        if self._check_started(time.monotonic()):
            return
        self.guard.idle(self)
        self._arm()

    def send_400_response(self, msg: str) -> None:
        """What h11 refuses (not HTTP, a bad or repeated Content-Length, bad chunks, a head
        over MAX_HEAD_BYTES): a JSON 400 like every other error, and the connection closed."""
        body = json.dumps({"error": f"400 {BAD_REQUEST}; connection closed"}).encode() + b"\n"
        headers = [(b"content-type", b"application/json"), (b"connection", b"close")]
        for event in (
            h11.Response(status_code=400, headers=headers, reason=b"Bad Request"),
            h11.Data(data=body),
            h11.EndOfMessage(),
        ):
            self.transport.write(self.conn.send(event))
        self.transport.close()

    def _check_started(self, read_at: float) -> bool:
        """A request head was parsed since the last check: stop the head timer, and tell the
        app when its bytes were read (its task runs later, after the loop's other ready work:
        at 256 callers that wait is part of the request's time, and of its deadline)."""
        cycle = self.cycle
        if cycle is not None and cycle is not self._cycle_seen and not cycle.response_complete:
            self._cycle_seen = cycle
            cycle.scope.setdefault("state", {})[READ_AT] = read_at
            self._disarm()
            self.guard.busy(self)
            return True
        return False

    def _arm(self) -> None:
        self._disarm()
        self._head_timer = self.loop.call_later(HEAD_TIMEOUT_S, self._head_timeout)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timeout(self) -> None:
        self._head_timer = None
        if self.cycle is not None and not self.cycle.response_complete:
            return  # a request is being answered
        log.debug("HTTP: no request head from %s in %.0fs: closed", self.host, HEAD_TIMEOUT_S)
        self.transport.close()


def _certificate_name(cert: dict | None) -> str | None:
    """The commonName of a peer certificate (ssl's getpeercert() form), or None."""
    for rdn in (cert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


class HttpEndpoint:
    """`app` on `listen` (host:port; port 0: a free one), served on one thread. `tls`: (cert,
    key, ca) PEM files for HTTPS asking callers for a certificate of that CA."""

    def __init__(
        self,
        listen: str,
        app: ServingApp,
        tls: tuple[Path, Path, Path] | None = None,
        guard: ConnectionGuard | None = None,
    ) -> None:
        host, _, port = listen.rpartition(":")
        self.host = host.strip("[]") or "127.0.0.1"
        self.app = app
        self.guard = guard or ConnectionGuard()
        _raise_file_limit()
        try:
            family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
            # IPPROTO_TCP named: asyncio turns Nagle's algorithm off only on sockets whose
            # proto says TCP, and a reply's head and body leave in two writes (with Nagle, the
            # body waited 40 ms for the caller's delayed ACK of the head)
            self._sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._sock.bind((self.host, int(port)))
        except (OSError, ValueError) as err:
            raise DataError(f"--http {listen}: cannot listen ({err})") from None
        self.port = self._sock.getsockname()[1]
        protocol = type("Protocol", (_Protocol,), {"guard": self.guard})
        tls_options: dict[str, Any] = {}
        if tls is not None:
            cert, key, ca = tls
            tls_options = {"ssl_certfile": str(cert), "ssl_keyfile": str(key),
                           "ssl_ca_certs": str(ca), "ssl_cert_reqs": ssl.CERT_OPTIONAL}  # fmt: skip
        config = uvicorn.Config(
            app, http=protocol, lifespan="off", access_log=False, log_config=None,
            server_header=False, date_header=False, timeout_keep_alive=int(HEAD_TIMEOUT_S),
            h11_max_incomplete_event_size=MAX_HEAD_BYTES, backlog=BACKLOG, **tls_options,
        )  # fmt: skip
        budget(logging.getLogger("uvicorn.error"))  # a flood of bad requests: a few lines
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._run, name="vfl-http", daemon=True)

    def _run(self) -> None:
        self.server.run(sockets=[self._sock])

    def start(self) -> HttpEndpoint:
        self._thread.start()
        end = time.monotonic() + START_TIMEOUT_S
        while not self.server.started and self._thread.is_alive() and time.monotonic() < end:
            time.sleep(0.01)
        if not self.server.started:
            raise DataError(f"--http {self.host}:{self.port}: the server did not start")
        scheme = "HTTPS" if self.server.config.ssl is not None else "HTTP"
        log.info("serving predictions over %s on %s (port %d)", scheme, self.host, self.port)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=5.0)
        self.app.close()
        with contextlib.suppress(OSError):
            self._sock.close()


def _raise_file_limit() -> None:
    """Open connections are file descriptors: the soft limit up to MAX_CONNECTIONS and some."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = MAX_CONNECTIONS + 1024
    if soft != resource.RLIM_INFINITY and soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(want, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
