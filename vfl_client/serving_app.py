"""The gateway's HTTP API as a minimal ASGI application (served by uvicorn over h11:
vfl_client.serving_http).

    POST /predict        {"ids": [...], "deadline_ms": optional, "features": optional}
    GET  /predict?id=X&deadline_ms=Y
    GET  /health/live    200 while the process serves HTTP
    GET  /health/ready   200 once the bundle is loaded and warmed up and the label party's own
                         predictor answers; else 503. The body names each peer's state.
    GET  /health         the same as /health/ready
    GET  /metrics        Prometheus text (vfl_client.serving_metrics)

Replies are JSON. A malformed request is a 400 naming what is wrong, a body over MAX_BODY_BYTES
a 413 (the connection closed), a request whose deadline cannot be met a 429 with Retry-After
(vfl_core.serving.admission), a request before the gateway is ready a 503, an unauthenticated
one a 401 (vfl_client.serving_auth). /health/* and /metrics need no credentials: they hold no
customer's data and probes and scrapers ask them. Every reply to /predict carries the gateway's
own time on it (`Server-Timing: gateway;dur=MS, read;dur=..., own, parties, heads, loop`),
counted from when its handler started; `loop`, outside that: how long the request waited
between the event loop reading its bytes (READ_AT, set by the protocol) and its handler
starting, in the loop's queue of ready tasks. The deadline runs from READ_AT, or to the
caller's own stamp (X-Deadline-At) when earlier. An answer's last deadline check runs here on
the event loop, after it is encoded, with no await between it and its bytes written: one late
then is a 429 (vfl_core.serving.admission: LATE), and an answer sent carries the wall clock at
that check (`X-Answered-At`), so a caller can tell its own delay from the gateway's.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs

from vfl_client.serving_auth import Authorizer
from vfl_client.serving_health import Readiness
from vfl_client.serving_metrics import CONTENT_TYPE, ServingMetrics
from vfl_core.errors import DataError
from vfl_core.serving.admission import LATE, QUEUE_FULL, Overloaded
from vfl_core.serving.gateway import OnlinePrediction, check_deadline
from vfl_wire.log_budget import budget

log = logging.getLogger(__name__)
# one line per refused request, as the gRPC servers write (callers cause them: budgeted)
refusals = budget(logging.getLogger(f"{__name__}.refused"))
REFUSAL_CHARS = 200  # of the error quoted in the line (a 404 quotes the caller's path)

MAX_BODY_BYTES = 1 << 20
# Requests predicted at once: each waits on its peers (no CPU), the gateway's own work is
# combined across them (vfl_core.serving.combine); up to WAITING_PER_WORKER times as many wait
# for a thread, and a request beyond those is shed at once (QUEUE_FULL). Measured on 2 cores
# at 64 back-to-back callers, 16 threads and 16 waiting shed 68% of the requests (each 429 is
# answered at once and its caller asks again); 64 threads shed none.
DEFAULT_WORKERS = 64
WAITING_PER_WORKER = 4
# scope["state"] key: time.monotonic() when the event loop read the request (serving_http)
READ_AT = "vfl.read_at"
# a request header: the caller's deadline in seconds since the epoch (it stamps it when sending)
DEADLINE_HEADER = b"x-deadline-at"

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


@dataclass
class _Reply:
    status: HTTPStatus
    body: dict[str, Any]
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    close: bool = False
    data: bytes | None = None  # the body already encoded (an answer: before its last check)
    sent: Callable[[], None] | None = None  # run once the reply is written


class ServingApp:
    """ASGI app over a Readiness (which holds the gateway once it is loaded)."""

    def __init__(
        self,
        readiness: Readiness,
        metrics: ServingMetrics,
        authorizer: Authorizer,
        workers: int = DEFAULT_WORKERS,
    ) -> None:
        self.readiness = readiness
        self.metrics = metrics
        self.authorizer = authorizer
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="vfl-http")
        self.max_waiting = WAITING_PER_WORKER * workers
        self._waiting = 0  # requests handed to the pool and not started yet
        self._lock = threading.Lock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        arrived = time.monotonic()
        path, method = scope["path"], scope["method"]
        framing = _ambiguous_framing(scope["headers"])
        if framing is not None:  # h11 reads such a body by its chunks; a proxy may not
            return await self._refuse(
                send, _Reply(HTTPStatus.BAD_REQUEST, {"error": framing}, close=True)
            )
        if path in ("/health", "/health/ready", "/health/live") and method == "GET":
            ready, body = self.readiness.describe()
            ok = ready or path == "/health/live"
            status = HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE
            return await _send(send, _Reply(status, body))
        if path == "/metrics" and method == "GET":
            return await _send_text(send, self.metrics.exposition())
        if path != "/predict" or method not in ("GET", "POST"):
            error = f"no such path {method} {path[:100]!r}"
            return await self._refuse(send, _Reply(HTTPStatus.NOT_FOUND, {"error": error}))
        refused = self.authorizer.refusal(scope)
        if refused is not None:
            headers = [(b"www-authenticate", b"Bearer")]
            reply = _Reply(HTTPStatus.UNAUTHORIZED, {"error": refused}, headers, close=True)
            return await self._refuse(send, reply)
        reply = await self._predict(scope, receive, method, arrived)
        if reply.status >= 400:
            return await self._refuse(send, reply)
        await _send(send, reply)  # no await between an answer's last check and its write
        if reply.sent is not None:
            reply.sent()

    async def _predict(self, scope: Scope, receive: Receive, method: str, arrived: float) -> _Reply:
        if method == "GET":
            query = parse_qs(scope["query_string"].decode("latin-1"))
            request: Any = {"ids": query.get("id", [])}
            if "deadline_ms" in query:
                request["deadline_ms"] = query["deadline_ms"][0]
        else:
            body = await _read_body(receive)
            if body is None:
                error = f"request body over {MAX_BODY_BYTES} bytes"
                return _Reply(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {"error": error}, close=True)
            try:
                request = json.loads(body or b"null")
            except (ValueError, RecursionError) as err:  # JSON, UTF-8, or nesting too deep
                return _Reply(HTTPStatus.BAD_REQUEST, {"error": f"body is not JSON: {err}"[:300]})
        gateway = self.readiness.gateway if self.readiness.ready else None
        if gateway is None:
            error = f"not ready: {self.readiness.phase}"
            return _Reply(
                HTTPStatus.SERVICE_UNAVAILABLE, {"error": error}, [(b"retry-after", b"1")]
            )
        if not isinstance(request, dict):
            return _Reply(
                HTTPStatus.BAD_REQUEST, {"error": 'body: give a JSON object {"ids": [...]}'}
            )
        phases = {"read": time.monotonic() - arrived}
        loop = asyncio.get_running_loop()
        # the gateway's own deadline runs from when the event loop read the request's bytes
        # (its wait in the loop's queue of ready tasks counts), the caller's from its stamp
        read_at = scope.get("state", {}).get(READ_AT, arrived)

        def predict() -> list[OnlinePrediction]:
            with self._lock:
                self._waiting -= 1
            return gateway.predict(ids, seconds, features, read_at, phases, stamp)

        self.metrics.inflight.inc()
        try:
            ids, deadline, features = parse_request(request)
            stamp = caller_deadline(scope["headers"])
            seconds = gateway.deadline_s if deadline is None else check_deadline(deadline)
            due = read_at + seconds if stamp is None else min(read_at + seconds, stamp)
            # shed here, on the event loop, what cannot be met already: a thread is not taken
            # (nor waited for) to say so; the thread checks again when it starts
            gateway.admission.admit(time.monotonic(), due)
            with self._lock:
                full = self._waiting >= self.max_waiting
                self._waiting += 0 if full else 1
            if full:
                raise Overloaded(QUEUE_FULL, f"{self.max_waiting} waiting for a thread")
            answers = await loop.run_in_executor(self.pool, predict)
            data = _encode({"predictions": [a.to_json() for a in answers]})
            # the last check, after the answer is encoded and the event loop took it back
            # late or not: from here to its bytes written nothing awaits
            checked, checked_wall = time.monotonic(), time.time()
            gateway.admission.check_late(checked, read_at + seconds, stamp)
        except Overloaded as err:
            self.metrics.shed.labels("http", err.reason).inc()
            if err.reason == LATE:
                self.metrics.overruns.labels("http").inc()
            retry = [(b"retry-after", b"1"), _timing(arrived, phases, scope)]
            return _Reply(HTTPStatus.TOO_MANY_REQUESTS, {"error": str(err)}, retry)
        except DataError as err:
            return _Reply(HTTPStatus.BAD_REQUEST, {"error": str(err)})
        except Exception:
            log.exception("HTTP predict failed")
            error = "internal error (see the server's log)"
            return _Reply(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": error})
        finally:
            self.metrics.inflight.dec()
        took = time.monotonic() - arrived
        overrun = phases.pop("overrun", None) is not None
        answered_at = (b"x-answered-at", f"{checked_wall:.6f}".encode())

        def sent() -> None:
            self.metrics.answered("http", took, answers, overrun)

        headers = [_timing(arrived, phases, scope), answered_at]
        return _Reply(HTTPStatus.OK, {}, headers, data=data, sent=sent)

    async def _refuse(self, send: Send, reply: _Reply) -> None:
        outcome = {429: "shed", 503: "not_ready"}.get(reply.status.value)
        outcome = outcome or ("refused" if reply.status < 500 else "error")
        self.metrics.requests.labels("http", outcome).inc()
        if 400 <= reply.status < 500 and reply.status != HTTPStatus.TOO_MANY_REQUESTS:
            error = str(reply.body.get("error", ""))
            quoted = error if len(error) <= REFUSAL_CHARS else f"{error[:REFUSAL_CHARS]}..."
            refusals.warning("HTTP request refused (%d): %s", reply.status.value, quoted)
        await _send(send, reply)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def parse_request(request: dict[str, Any]) -> tuple[Any, float | None, Any]:
    """(ids, deadline in seconds or None, inline features) of a request's JSON object."""
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


def caller_deadline(headers: list[tuple[bytes, bytes]]) -> float | None:
    """The caller's own deadline from its DEADLINE_HEADER (seconds since the epoch, the wall
    clock), as time.monotonic(); None without the header. The gateway uses it when earlier
    than its own (counted from when its handler started), so the time a request waited before
    the gateway read it counts too; a clock skew between caller and gateway moves it by as much."""
    value = next((v for k, v in headers if k == DEADLINE_HEADER), None)
    if value is None:
        return None
    try:
        at = float(value.decode("latin-1"))
    except ValueError:
        at = math.nan
    if not math.isfinite(at):
        shown = value[:40].decode("latin-1")
        raise DataError(f"X-Deadline-At: {shown!r} is not a time in seconds since the epoch")
    return time.monotonic() + (at - time.time())


def _ambiguous_framing(headers: list[tuple[bytes, bytes]]) -> str | None:
    """Why a request's body framing is ambiguous (request smuggling behind a proxy that reads
    it the other way), or None. h11 itself refuses two different Content-Lengths and bad chunks;
    a Content-Length beside Transfer-Encoding it reads by the chunks, as RFC 9112 allows, but
    a proxy in front may read it by the length: refused here, the connection closed."""
    names = {name for name, _ in headers}
    if b"transfer-encoding" in names and b"content-length" in names:
        return "Content-Length and Transfer-Encoding in one request: give one"
    return None


async def _read_body(receive: Receive) -> bytes | None:
    """The request body, or None past MAX_BODY_BYTES (the rest is left unread: the reply
    closes the connection)."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b""
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _timing(arrived: float, phases: dict[str, float], scope: Scope) -> tuple[bytes, bytes]:
    """Server-Timing: gateway (the whole request so far), then each step of a prediction, then
    loop: the wait before the handler started, after the event loop read the request."""
    loop = arrived - scope.get("state", {}).get(READ_AT, arrived)
    took = {"gateway": time.monotonic() - arrived} | phases | {"loop": max(0.0, loop)}
    return b"server-timing", ", ".join(f"{k};dur={1000 * s:.3f}" for k, s in took.items()).encode()


def _encode(body: dict[str, Any]) -> bytes:
    return json.dumps(body).encode() + b"\n"


async def _send(send: Send, reply: _Reply) -> None:
    data = _encode(reply.body) if reply.data is None else reply.data
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    if reply.close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": reply.status.value,
                "headers": headers + reply.headers})  # fmt: skip
    await send({"type": "http.response.body", "body": data})


async def _send_text(send: Send, data: bytes) -> None:
    headers = [
        (b"content-type", CONTENT_TYPE.encode()),
        (b"content-length", str(len(data)).encode()),
    ]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": data})
