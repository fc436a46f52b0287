"""JSON over HTTP for the gateway's predictions, so that `curl` works:

    curl -s localhost:8080/predict -d '{"ids": ["C00017"], "deadline_ms": 100}'

POST /predict with {"ids": [...], "deadline_ms": optional, "features": optional {id: {column:
cell}}} answers 200 {"predictions": [...]} (vfl_core.serving.gateway.OnlinePrediction.to_json);
GET /predict?id=X&deadline_ms=Y the same for one ID; GET /health 200 "ok". A malformed request
is a 400 with {"error": "..."} naming what is wrong; a body over MAX_BODY_BYTES a 413. The
deadline counts from when the request line was read (vfl_core.serving.gateway: a request whose
deadline was spent queued is answered at once from the gateway's own block). Every reply says
the gateway's own time on the request, from its request line read to its reply written, in a
`Server-Timing: gateway;dur=MS` header (the benchmark sets it beside the caller's time).

Plain HTTP: bind it to the loopback interface (the default) for an application on the same
host, or put a TLS proxy in front; the parties' links are gRPC with mutual TLS.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from vfl_core.errors import DataError
from vfl_core.serving.gateway import Gateway
from vfl_wire.log_budget import budget

log = logging.getLogger(__name__)
# one line per refused request, as the gRPC servers write (callers cause them: budgeted)
refusals = budget(logging.getLogger(f"{__name__}.refused"))
REFUSAL_CHARS = 200  # of the error quoted in the line (a 404 quotes the caller's path)

MAX_BODY_BYTES = 1 << 20
DRAIN_BYTES = 16 << 20  # an oversize body up to this is read and dropped (above: closed)
# A caller's connection costs a thread while open: one silent this long is closed, and above
# MAX_CONNECTIONS open at once a new one is closed at once (slow or idle callers cannot take
# every thread and the memory they hold).
IDLE_TIMEOUT_S = 30.0
MAX_CONNECTIONS = 512


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: one connection (and thread) per caller
    # headers and body leave in two writes: with Nagle's algorithm the body waits for the
    # caller's delayed ACK of the headers (40 ms on Linux)
    disable_nagle_algorithm = True
    timeout = IDLE_TIMEOUT_S  # on the socket: a read that waits longer ends the connection
    server: _Server
    arrived = 0.0  # time.monotonic() when the request line was read
    phases: dict[str, float] | None = None  # seconds per step of the last request (Server-Timing)

    def parse_request(self) -> bool:
        self.arrived = time.monotonic()
        self.phases = None
        return super().parse_request()

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path == "/health":
            return self._reply(HTTPStatus.OK, {"status": "ok"})
        if url.path != "/predict":
            return self._reply(HTTPStatus.NOT_FOUND, {"error": f"no such path {url.path!r}"})
        query = parse_qs(url.query)
        request: dict[str, Any] = {"ids": query.get("id", [])}
        if "deadline_ms" in query:
            request["deadline_ms"] = query["deadline_ms"][0]
        self._predict(request)

    def do_POST(self) -> None:
        if urlsplit(self.path).path != "/predict":
            return self._reply(HTTPStatus.NOT_FOUND, {"error": f"no such path {self.path!r}"})
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if length < 0:  # read(-1) would read until the caller closes, holding all it sends
            self.close_connection = True
            error = "Content-Length: give the body's size in bytes"
            return self._reply(HTTPStatus.BAD_REQUEST, {"error": error})
        if length > MAX_BODY_BYTES:
            self.close_connection = True
            if length <= DRAIN_BYTES:  # read, so the caller sees the 413 and not a reset
                self._discard(length)
            error = f"request body of {length} bytes; at most {MAX_BODY_BYTES}"
            return self._reply(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {"error": error})
        try:
            request = json.loads(self.rfile.read(length) or b"null")
        except (ValueError, RecursionError) as err:  # JSON, UTF-8, or nesting too deep
            error = f"body is not JSON: {str(err)[:200]}"
            return self._reply(HTTPStatus.BAD_REQUEST, {"error": error})
        if not isinstance(request, dict):
            error = 'body: give a JSON object {"ids": [...]}'
            return self._reply(HTTPStatus.BAD_REQUEST, {"error": error})
        self._predict(request)

    def _discard(self, length: int) -> None:
        while length > 0:
            chunk = self.rfile.read(min(length, 1 << 16))
            if not chunk:
                return
            length -= len(chunk)

    def _predict(self, request: dict[str, Any]) -> None:
        try:
            ids, deadline, features = _parse(request)
            self.phases = {"read": time.monotonic() - self.arrived}
            answers = self.server.gateway.predict(
                ids, deadline, features, self.arrived, self.phases
            )
        except DataError as err:
            return self._reply(HTTPStatus.BAD_REQUEST, {"error": str(err)})
        except Exception:
            log.exception("HTTP predict failed")
            error = "internal error (see the server's log)"
            return self._reply(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": error})
        self._reply(HTTPStatus.OK, {"predictions": [a.to_json() for a in answers]})

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """What http.server itself refuses (a line that is not HTTP, headers too long): JSON
        like every other error, and the connection closed."""
        status = HTTPStatus(code)
        self.close_connection = True
        self._reply(status, {"error": f"{code} {message or status.phrase}"[:300]})

    def _reply(self, status: HTTPStatus, body: dict[str, Any]) -> None:
        if 400 <= status < 500:  # a 500 logged its traceback already
            error = str(body.get("error", ""))
            quoted = error if len(error) <= REFUSAL_CHARS else f"{error[:REFUSAL_CHARS]}..."
            refusals.warning("HTTP request refused (%d): %s", status.value, quoted)
        data = json.dumps(body).encode() + b"\n"
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if self.arrived:
            self.send_header("Server-Timing", self._server_timing())
        self.end_headers()
        self.wfile.write(data)

    def _server_timing(self) -> str:
        """gateway: the whole request so far; then each step of a prediction (read: its
        headers, body and JSON; own, parties, heads: vfl_core.serving.gateway's steps)."""
        took = {"gateway": time.monotonic() - self.arrived} | (self.phases or {})
        return ", ".join(f"{name};dur={1000 * s:.3f}" for name, s in took.items())

    def log_message(self, format: str, *args: Any) -> None:
        if log.isEnabledFor(logging.DEBUG):  # formatted only when it is written: every request
            log.debug("http %s", format % args)


def _parse(request: dict[str, Any]) -> tuple[Any, float | None, Any]:
    unknown = sorted(set(request) - {"ids", "deadline_ms", "features"})
    if unknown:
        raise DataError(f"unknown request fields {unknown}: give ids, deadline_ms, features")
    deadline = request.get("deadline_ms")
    if deadline is not None:
        try:
            deadline = float(deadline) / 1000
        except (TypeError, ValueError):
            raise DataError(f"deadline_ms: {deadline!r} is not a number") from None
    features = request.get("features")
    if features is not None and not (
        isinstance(features, dict) and all(isinstance(v, dict) for v in features.values())
    ):
        raise DataError("features: give {id: {column: cell}}")
    return request.get("ids"), deadline, features


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default backlog of 5 drops the SYNs of callers connecting at once: each
    # dropped one waits a second for its retransmission
    request_queue_size = 256

    def __init__(self, address: tuple[str, int], gateway: Gateway) -> None:
        super().__init__(address, _Handler)
        self.gateway = gateway
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            log.warning("HTTP: %d connections open; closing a new one", MAX_CONNECTIONS)
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that failed (reset, timed out, garbage): one line, no traceback."""
        err = sys.exc_info()[1]
        log.debug("HTTP connection from %s ended: %r", client_address, err)


class HttpEndpoint:
    """The HTTP endpoint on `host:port` (port 0: a free one), served on one thread."""

    def __init__(self, listen: str, gateway: Gateway) -> None:
        host, _, port = listen.rpartition(":")
        try:
            self.server = _Server((host.strip("[]") or "127.0.0.1", int(port)), gateway)
        except (OSError, ValueError) as err:
            raise DataError(f"--http {listen}: cannot listen ({err})") from None
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, name="vfl-http")

    def start(self) -> HttpEndpoint:
        self._thread.start()
        log.info(
            "serving predictions over HTTP on %s (port %d)",
            self.server.server_address[0],
            self.port,
        )
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5.0)
