"""The gateway's Prometheus metrics (prometheus_client), served at GET /metrics on its HTTP port.

    vfl_serving_requests_total{transport, outcome}   requests by outcome: ok, shed, refused
                                                      (a 4xx), error (a 5xx)
    vfl_serving_request_seconds{transport}            latency histogram of answered requests,
                                                      from the gateway's read of the request
    vfl_serving_shed_total{transport, reason}         requests shed by admission control
    vfl_serving_answers_total{parties}                answers (one per ID) by the set of parties
                                                      used, e.g. "party0+party2"
    vfl_serving_deadline_overruns_total{transport}    requests answered past their deadline
    vfl_serving_peer_state{peer, state}               1 for each peer's current state (up, down,
                                                      timed out, lagging, unknown), else 0
    vfl_serving_inflight                              requests being answered now
    vfl_serving_ready                                 1 once warmed up (readiness)

One registry per gateway (not the process-wide default), so that tests and several gateways in
one process do not share counters.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from vfl_core.serving.gateway import OnlinePrediction
from vfl_core.serving.peer_state import STATES

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# seconds: around a 100 ms deadline, finely, and far enough for 10 s ones
BUCKETS = (0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.115, 0.15, 0.25, 0.5, 1, 2.5, 10)


class _PeerStates(Collector):
    """vfl_serving_peer_state, read from the gateway when scraped."""

    def __init__(self, peers: Callable[[], dict[str, dict[str, object]]]) -> None:
        self._peers = peers

    def collect(self):  # type: ignore[no-untyped-def]
        family = GaugeMetricFamily(
            "vfl_serving_peer_state", "1 for each peer's current state", labels=["peer", "state"]
        )
        for name, described in self._peers().items():
            for state in STATES:
                family.add_metric([name, state], 1.0 if described["state"] == state else 0.0)
        yield family


class ServingMetrics:
    """The counters the HTTP and gRPC endpoints update, and their text exposition."""

    def __init__(self, peers: Callable[[], dict[str, dict[str, object]]] | None = None) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "vfl_serving_requests", "requests by outcome", ["transport", "outcome"], registry=r
        )
        self.latency = Histogram(
            "vfl_serving_request_seconds",
            "answered requests' time at the gateway",
            ["transport"],
            buckets=BUCKETS,
            registry=r,
        )
        self.shed = Counter(
            "vfl_serving_shed", "requests shed by admission control", ["transport", "reason"],
            registry=r,
        )  # fmt: skip
        self.answers = Counter(
            "vfl_serving_answers", "answers (one per ID) by the parties used", ["parties"],
            registry=r,
        )  # fmt: skip
        self.overruns = Counter(
            "vfl_serving_deadline_overruns", "requests answered past their deadline",
            ["transport"], registry=r,
        )  # fmt: skip
        self.inflight = Gauge("vfl_serving_inflight", "requests being answered", registry=r)
        self.ready = Gauge("vfl_serving_ready", "1 once warmed up", registry=r)
        if peers is not None:
            r.register(_PeerStates(peers))

    def answered(
        self, transport: str, seconds: float, answers: Sequence[OnlinePrediction], overrun: bool
    ) -> None:
        self.requests.labels(transport, "ok").inc()
        self.latency.labels(transport).observe(seconds)
        if overrun:
            self.overruns.labels(transport).inc()
        for answer in answers:
            self.answers.labels("+".join(answer.used) or "none").inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
