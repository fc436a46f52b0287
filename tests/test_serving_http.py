"""The gateway's HTTP endpoint in process: every reply says where the gateway's time on it went
(Server-Timing), so a slow request can be told apart: read, own embedding, parties, heads."""

from __future__ import annotations

import json
import re
import urllib.request

from test_serving_gateway import gateway, served  # noqa: F401 (the fixture)

from vfl_client.serving_http import HttpEndpoint

_METRIC = re.compile(r"(\w+);dur=([0-9.]+)")


def test_given_a_prediction_when_answered_then_server_timing_names_each_step(served) -> None:  # noqa: F811
    _, parties, _, _ = served
    some_id = parties[0].split("test").ids[0]
    endpoint = HttpEndpoint("127.0.0.1:0", gateway(served)).start()
    try:
        url = f"http://127.0.0.1:{endpoint.port}/predict?id={some_id}"
        with urllib.request.urlopen(url, timeout=30) as reply:
            timing = reply.headers["Server-Timing"]
            body = json.loads(reply.read())
    finally:
        endpoint.stop()
    assert body["predictions"][0]["id"] == some_id
    steps = {name: float(ms) for name, ms in _METRIC.findall(timing)}
    assert list(steps) == ["gateway", "read", "own", "parties", "heads"]
    assert all(ms >= 0 for ms in steps.values())
    assert sum(v for k, v in steps.items() if k != "gateway") <= steps["gateway"]
