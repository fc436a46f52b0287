"""The gateway's HTTP endpoint in process: every reply says where the gateway's time on it went
(Server-Timing), so a slow request can be told apart: read, own embedding, parties, heads."""

from __future__ import annotations

import json
import logging
import re
import socket
import time
import urllib.error
import urllib.request

import pytest
from test_serving_gateway import gateway, served  # noqa: F401 (the fixture)

from vfl_client.serving_app import READ_AT, ServingApp, refusals
from vfl_client.serving_auth import Authorizer
from vfl_client.serving_health import READY, Readiness
from vfl_client.serving_http import HttpEndpoint
from vfl_client.serving_metrics import ServingMetrics
from vfl_core.serving.admission import LATE, STAMP_GRACE_S
from vfl_wire.log_budget import LineBudget

_METRIC = re.compile(r"(\w+);dur=([0-9.]+)")


def endpoint_of(gw) -> HttpEndpoint:
    """The gateway's HTTP endpoint, ready, open to anyone (loopback)."""
    readiness = Readiness("party0")
    readiness.gateway = gw
    readiness.set(READY)
    app = ServingApp(readiness, ServingMetrics(gw.peer_health), Authorizer("none"))
    return HttpEndpoint("127.0.0.1:0", app)


def test_given_a_prediction_when_answered_then_server_timing_names_each_step(served) -> None:  # noqa: F811
    _, parties, _, _ = served
    some_id = parties[0].split("test").ids[0]
    endpoint = endpoint_of(gateway(served)).start()
    try:
        url = f"http://127.0.0.1:{endpoint.port}/predict?id={some_id}"
        with urllib.request.urlopen(url, timeout=30) as reply:
            timing = reply.headers["Server-Timing"]
            body = json.loads(reply.read())
    finally:
        endpoint.stop()
    assert body["predictions"][0]["id"] == some_id
    steps = {name: float(ms) for name, ms in _METRIC.findall(timing)}
    assert list(steps) == ["gateway", "read", "own", "parties", "heads", "loop"]
    assert all(ms >= 0 for ms in steps.values())
    # loop: before the handler started, outside the gateway's time
    assert sum(v for k, v in steps.items() if k not in ("gateway", "loop")) <= steps["gateway"]


def test_given_refused_requests_when_answered_then_one_budgeted_line_each(served, caplog) -> None:  # noqa: F811
    """Stop 41: a 4xx was answered but never logged (gRPC refusals are, one line each)."""
    endpoint = endpoint_of(gateway(served)).start()
    bodies = [b'{"ids": [1]}', b"{not json", b'{"ids": ["a"], "deadline_ms": -5}']
    try:
        with caplog.at_level(logging.WARNING, logger="vfl_client.serving_app.refused"):
            for body in bodies:
                request = urllib.request.Request(f"http://127.0.0.1:{endpoint.port}/predict", body)
                with pytest.raises(urllib.error.HTTPError) as err:
                    urllib.request.urlopen(request, timeout=30)
                assert err.value.code == 400
    finally:
        endpoint.stop()
    lines = [r.getMessage() for r in caplog.records if r.name.endswith(".refused")]
    assert len(lines) == 3
    assert all(line.startswith("HTTP request refused (400): ") for line in lines)
    assert "ids" in lines[0] and "not JSON" in lines[1] and "deadline" in lines[2]
    assert all("Traceback" not in line for line in lines)
    assert any(isinstance(f, LineBudget) for f in refusals.filters)  # a flood writes a few


def test_given_the_endpoint_then_its_socket_is_tcp_so_asyncio_turns_nagle_off(served) -> None:  # noqa: F811
    """asyncio sets TCP_NODELAY on accepted sockets only where the listening socket's proto
    says TCP; with Nagle on, a reply's body waited 40 ms for the caller's delayed ACK."""
    endpoint = endpoint_of(gateway(served))
    try:
        assert endpoint._sock.proto == socket.IPPROTO_TCP
    finally:
        endpoint._sock.close()


class _EchoReadAt:
    """An ASGI app answering when the event loop read its request, and when it ran."""

    async def __call__(self, scope, receive, send) -> None:
        ran = time.monotonic()
        body = json.dumps({"read_at": scope["state"].get(READ_AT), "ran": ran}).encode()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})

    def close(self) -> None:
        pass


def test_given_a_request_when_read_then_the_app_learns_when_its_bytes_were_read() -> None:
    endpoint = HttpEndpoint("127.0.0.1:0", _EchoReadAt()).start()  # type: ignore[arg-type]
    try:
        sent = time.monotonic()
        with urllib.request.urlopen(f"http://127.0.0.1:{endpoint.port}/x", timeout=30) as reply:
            seen = json.loads(reply.read())
    finally:
        endpoint.stop()
    # the read is stamped before the request's task waited for the loop (Server-Timing's loop)
    assert sent <= seen["read_at"] <= seen["ran"]


class _TakenBackLate:
    """A gateway whose answers come back to the event loop `late_s` after they were ready (an
    interpreter busy with other threads), otherwise the real one."""

    def __init__(self, gw, late_s: float) -> None:
        self._gw, self.late_s = gw, late_s

    def __getattr__(self, name: str):
        return getattr(self._gw, name)

    def predict(self, *args, **kwargs):
        answers = self._gw.predict(*args, **kwargs)
        time.sleep(self.late_s)
        return answers


def _lower(headers) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


def _stamped(port: int, some_id: str, ahead_s: float):
    stamp = time.time() + ahead_s
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/predict?id={some_id}", headers={"X-Deadline-At": f"{stamp:.6f}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, _lower(reply.headers), json.loads(reply.read()), stamp
    except urllib.error.HTTPError as err:
        return err.code, _lower(err.headers), json.loads(err.read()), stamp


def test_given_an_answer_ready_past_the_callers_deadline_then_a_counted_429_not_a_late_200(
    served,  # noqa: F811
) -> None:
    """The last deadline check runs on the event loop just before the reply is written: an
    answer the loop takes back after the caller's stamp is a 429 ("deadline passed while
    answering"), counted as shed and as an overrun, never a 200 after the caller's deadline."""
    _, parties, _, _ = served
    some_id = parties[0].split("test").ids[0]
    late = _TakenBackLate(gateway(served), late_s=0.0)
    endpoint = endpoint_of(late).start()
    try:
        status, headers, body, stamp = _stamped(endpoint.port, some_id, ahead_s=30.0)
        assert status == 200 and body["predictions"][0]["id"] == some_id
        # the wall clock at the last check: never past the stamp's grace
        assert float(headers["x-answered-at"]) <= stamp + STAMP_GRACE_S
        late.late_s = 1.0  # ready in time, taken back 1 s later: past a 0.5 s stamp
        status, headers, body, _ = _stamped(endpoint.port, some_id, ahead_s=0.5)
        assert status == 429 and headers["retry-after"] == "1", body
        assert LATE in body["error"] and "x-answered-at" not in headers
        metrics = endpoint.app.metrics.exposition().decode()
    finally:
        endpoint.stop()
    assert f'vfl_serving_shed_total{{reason="{LATE}",transport="http"}} 1.0' in metrics
    assert 'vfl_serving_deadline_overruns_total{transport="http"} 1.0' in metrics
    assert 'vfl_serving_requests_total{outcome="ok",transport="http"} 1.0' in metrics
