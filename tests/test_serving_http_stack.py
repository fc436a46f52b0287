"""The gateway's HTTP endpoint as a hostile or busy caller sees it, with real processes (issue
46): three `vfl-client --serve-bundle` processes, the gateway's HTTP served by uvicorn/h11 with
bearer tokens. Request smuggling (Content-Length with Transfer-Encoding, two Content-Lengths,
malformed chunks) is refused and the connection closed; 1,000 idle connections do not lock a new
caller out; a caller without the token is refused; health, readiness, metrics and shedding."""

from __future__ import annotations

import json
import signal
import socket
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tabular_tables import LABEL_COLUMN, write_tables

from benchmarks.serve.cluster import ServingCluster, train_bundles
from vfl_core.config import TrainConfig
from vfl_core.model.model_config import ModelConfig
from vfl_core.serving.admission import STAMP_GRACE_S

pytestmark = pytest.mark.slow

ID = "customer_id"
NAMES = ("party0", "party1", "party2")
TOKEN = "s3cret-token-of-the-bank-application"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("stack")
    paths = write_tables(tmp / "data", n=300, share=0.85)
    tables = [paths[name] for name in ("bank", "retail", "telecom")]
    config = TrainConfig(epochs=1, model=ModelConfig(embed_dim=8, hidden=(16,)))
    bundles, _, _ = train_bundles(
        tables, tmp / "bundles", id_column=ID, label_column=LABEL_COLUMN, config=config
    )
    tokens = tmp / "tokens"
    tokens.write_text(f"another-token\n{TOKEN}\n")
    with ServingCluster(tmp / "procs") as cluster:
        peers = []
        for k in (1, 2):
            proc = cluster.start_party(NAMES[k], bundles[k], tables[k], ID)
            peers.append(f"{k}=127.0.0.1:{proc.port}")
        extra = ["--http-auth", "token", "--http-token-file", str(tokens), "--deadline-ms", "2000"]
        proc = cluster.start_gateway(NAMES[0], bundles[0], tables[0], ID, peers, extra)
        yield cluster, proc


def exchange(port: int, data: bytes, timeout: float = 15.0) -> bytes:
    """Send `data` on one connection and read until the server closes it."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def request(
    port: int,
    method: str,
    path: str,
    body: bytes = b"",
    token: str | None = TOKEN,
    extra: tuple[str, ...] = (),
) -> tuple[int, dict[str, str], bytes]:
    head = [f"{method} {path} HTTP/1.1", "Host: gw", "Connection: close", *extra]
    if token is not None:
        head.append(f"Authorization: Bearer {token}")
    if body:
        head.append(f"Content-Length: {len(body)}")
    raw = exchange(port, ("\r\n".join(head) + "\r\n\r\n").encode() + body)
    status_line, _, rest = raw.partition(b"\r\n")
    header_text, _, payload = rest.partition(b"\r\n\r\n")
    headers = {}
    for line in header_text.decode().split("\r\n"):
        key, _, value = line.partition(":")
        headers[key.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers, payload


def grpc_health(port: int) -> str:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


def predict_body(ids: list[str], **extra: object) -> bytes:
    return json.dumps({"ids": ids, **extra}).encode()


def responses(raw: bytes) -> int:
    return raw.count(b"HTTP/1.1 ")


@pytest.mark.parametrize(
    "smuggled",
    [
        # Content-Length and Transfer-Encoding: which one ends the body is what smuggling needs
        b"POST /predict HTTP/1.1\r\nHost: gw\r\nContent-Length: 4\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
        b"GET /predict?id=C00001 HTTP/1.1\r\nHost: gw\r\n\r\n",
        # two different Content-Lengths: the leftover bytes once ran as a second request
        b"POST /predict HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\nContent-Length: 60\r\n\r\n"
        b"{}GET /predict?id=C00001 HTTP/1.1\r\nHost: gw\r\n\r\n",
        # a chunk whose size is not hexadecimal
        b"POST /predict HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"zz\r\n{}\r\n0\r\n\r\nGET /predict?id=C00001 HTTP/1.1\r\nHost: gw\r\n\r\n",
        # a chunk longer than its size says
        b"POST /predict HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"2\r\n{}xx\r\n0\r\n\r\nGET /predict?id=C00001 HTTP/1.1\r\nHost: gw\r\n\r\n",
    ],
    ids=["cl-and-te", "two-cl", "bad-chunk-size", "chunk-overrun"],
)
def test_given_a_smuggling_request_when_sent_then_refused_and_the_connection_closed(
    gateway, smuggled: bytes
) -> None:
    _, proc = gateway
    raw = exchange(proc.http_port, smuggled)
    assert raw.startswith(b"HTTP/1.1 400"), raw[:200]
    assert responses(raw) == 1, raw  # the smuggled second request never ran


def test_given_1000_idle_connections_when_a_new_caller_asks_then_it_is_answered(gateway) -> None:
    _, proc = gateway
    idle = []
    try:
        for _ in range(1000):
            idle.append(socket.create_connection(("127.0.0.1", proc.http_port), timeout=10))
        for sock in idle[:100]:
            sock.sendall(b"POST /predict HTTP/1.1\r\nHost: gw\r\n")  # a head never finished
        start = time.monotonic()
        status, _, body = request(proc.http_port, "POST", "/predict", predict_body(["C00001"]))
        assert status == 200, body
        assert time.monotonic() - start < 10.0
    finally:
        for sock in idle:
            sock.close()


def test_given_no_or_a_wrong_token_when_predicting_then_refused(gateway) -> None:
    _, proc = gateway
    body = predict_body(["C00001"])
    for token in (None, "not-the-token"):
        status, headers, payload = request(proc.http_port, "POST", "/predict", body, token)
        assert status == 401 and "unauthenticated" in json.loads(payload)["error"]
        assert headers["www-authenticate"] == "Bearer"
    status, _, payload = request(proc.http_port, "POST", "/predict", body)
    assert status == 200 and json.loads(payload)["predictions"][0]["id"] == "C00001"


def test_given_every_party_up_then_ready_with_each_peer_up(gateway) -> None:
    _, proc = gateway
    for path in ("/health/live", "/health/ready", "/health"):
        status, _, payload = request(proc.http_port, "GET", path, token=None)
        assert status == 200, (path, payload)
    ready = json.loads(payload)
    assert ready["ready"] and ready["phase"] == "ready" and ready["own_predictor"]
    assert {p: s["state"] for p, s in ready["peers"].items()} == {"party1": "up", "party2": "up"}


def test_given_a_deadline_that_cannot_be_met_then_shed_with_429_and_counted(gateway) -> None:
    _, proc = gateway
    body = predict_body(["C00001"], deadline_ms=0.001)  # spent before the gateway starts it
    status, headers, payload = request(proc.http_port, "POST", "/predict", body)
    assert status == 429 and headers["retry-after"] == "1", payload
    assert "deadline spent" in json.loads(payload)["error"]
    _, _, metrics = request(proc.http_port, "GET", "/metrics", token=None)
    text = metrics.decode()
    shed = 'vfl_serving_shed_total{reason="deadline spent queued at the gateway",transport="http"}'
    assert any(line.startswith(shed) and float(line.split()[-1]) >= 1 for line in text.splitlines())
    assert 'vfl_serving_peer_state{peer="party1",state="up"} 1.0' in text
    assert "vfl_serving_request_seconds_bucket" in text and "vfl_serving_answers_total" in text


def test_given_the_callers_own_deadline_then_used_when_earlier_and_shed_once_spent(
    gateway,
) -> None:
    """X-Deadline-At: the caller's deadline (seconds since the epoch, stamped when it sent the
    request); one already past is shed as spent and counted, one later than the gateway's own
    deadline does not extend it, and one that is not a time is a 400 naming the header."""
    _, proc = gateway
    body = predict_body(["C00001"])
    spent = (f"X-Deadline-At: {time.time() - 1.0:.6f}",)
    status, headers, payload = request(proc.http_port, "POST", "/predict", body, extra=spent)
    assert status == 429 and headers["retry-after"] == "1", payload
    assert "deadline spent" in json.loads(payload)["error"]
    later = (f"X-Deadline-At: {time.time() + 3600:.6f}",)
    status, _, payload = request(proc.http_port, "POST", "/predict", body, extra=later)
    assert status == 200 and json.loads(payload)["predictions"][0]["id"] == "C00001"
    for bad in ("soon", "nan", "inf"):
        status, _, payload = request(
            proc.http_port, "POST", "/predict", body, extra=(f"X-Deadline-At: {bad}",)
        )
        error = json.loads(payload)["error"]
        assert status == 400 and "X-Deadline-At" in error and "epoch" in error, payload
    _, _, metrics = request(proc.http_port, "GET", "/metrics", token=None)
    shed = 'vfl_serving_shed_total{reason="deadline spent queued at the gateway",transport="http"}'
    assert any(line.startswith(shed) for line in metrics.decode().splitlines())


def test_given_a_peer_that_never_answers_then_not_ready_while_warming_then_ready(
    gateway, tmp_path: Path
) -> None:
    """A peer that accepts connections and says nothing: the warm-up waits for it (5 s), and
    until then the gateway is not ready; then ready, the peer named as not answering."""
    cluster, _ = gateway
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(16)
    try:
        bundles = Path(cluster.procs["party0"].popen.args[4]).parent  # --serve-bundle DIR
        tables = Path(cluster.procs["party0"].popen.args[6])  # --data TABLE
        late = ServingCluster(tmp_path / "late")
        with late:
            peers = [f"1=127.0.0.1:{hole.getsockname()[1]}"]
            gw = late.start_gateway(
                "party0", bundles / "party0", tables, ID, peers, [], wait_ready=False
            )
            status, _, payload = request(gw.http_port, "GET", "/health/ready", token=None)
            assert status == 503 and json.loads(payload)["phase"] in ("loading", "warming")
            assert request(gw.http_port, "GET", "/health/live", token=None)[0] == 200
            assert grpc_health(gw.port) == "NOT_SERVING"
            end = time.monotonic() + 30
            while time.monotonic() < end:
                status, _, payload = request(gw.http_port, "GET", "/health/ready", token=None)
                if status == 200:
                    break
                time.sleep(0.2)
            ready = json.loads(payload)
            assert status == 200 and ready["peers"]["party1"]["state"] in ("timed out", "down")
            assert grpc_health(gw.port) == "SERVING"
    finally:
        hole.close()


def test_given_inline_features_with_nan_or_a_missing_column_then_400_naming_the_column(
    gateway,
) -> None:
    _, proc = gateway
    row = {"yearly_income": 41000, "age_years": 37, "home_region": "Southmoor"}
    ok = predict_body(["new-1"], features={"new-1": row})
    assert request(proc.http_port, "POST", "/predict", ok)[0] == 200
    nan = b'{"ids": ["new-1"], "features": {"new-1": {"yearly_income": NaN, "age_years": 37, '
    nan += b'"home_region": "Southmoor"}}}'
    status, _, payload = request(proc.http_port, "POST", "/predict", nan)
    assert status == 400 and "column 'yearly_income'" in json.loads(payload)["error"]
    partial = predict_body(["new-1"], features={"new-1": {"age_years": 37, "home_region": "x"}})
    status, _, payload = request(proc.http_port, "POST", "/predict", partial)
    assert status == 400 and "['yearly_income'] are missing" in json.loads(payload)["error"]


def _shed_total(port: int) -> float:
    _, _, metrics = request(port, "GET", "/metrics", token=None)
    lines = metrics.decode().splitlines()
    prefix = "vfl_serving_shed_total{"
    return sum(float(x.split()[-1]) for x in lines if x.startswith(prefix) and "http" in x)


def test_given_a_party_frozen_then_stamped_requests_answered_by_their_deadline_or_counted_429(
    gateway,
) -> None:
    """party2 SIGSTOPped, stamped requests one after another: each is a 200 whose last
    deadline check (X-Answered-At, the gateway's wall clock just before writing it) was within
    STAMP_GRACE_S of the caller's stamp, or a 429 the gateway counted; none fails, and once
    party2 has been silent three deadlines it is left out of the 200s."""
    cluster, proc = gateway
    before = _shed_total(proc.http_port)
    replies = []
    cluster.signal("party2", signal.SIGSTOP)
    try:
        end = time.monotonic() + 3.0
        while time.monotonic() < end:
            stamp = time.time() + 0.15
            extra = (f"X-Deadline-At: {stamp:.6f}",)
            body = predict_body(["C00001"], deadline_ms=150)
            status, headers, payload = request(
                proc.http_port, "POST", "/predict", body, extra=extra
            )
            replies.append((status, headers, json.loads(payload), stamp))
    finally:
        cluster.signal("party2", signal.SIGCONT)
    assert {s for s, _, _, _ in replies} <= {200, 429}, replies
    answered = [(h, p, stamp) for s, h, p, stamp in replies if s == 200]
    assert answered, "party2 never left out"
    for headers, _, stamp in answered:  # 1 ms: the wall and monotonic clocks' drift
        assert float(headers["x-answered-at"]) <= stamp + STAMP_GRACE_S + 1e-3, headers
    assert "party2" in answered[-1][1]["predictions"][0]["missing"]
    shed = sum(1 for s, _, _, _ in replies if s == 429)
    assert _shed_total(proc.http_port) - before == shed
