"""A serving party's readiness: what /health/ready, the gRPC health service and the
`vfl_serving_ready` metric say.

Phases: `loading` (the bundle's models and the party's rows are being read), `warming` (its
models are run once, and at a gateway each peer is asked once, so that the first requests pay
neither torch's first calls nor the peers' connection set-up), `ready`. Ready means: the bundle
is loaded, warmed up, and the party's own predictor answered (at a gateway: its own block's
embedding and its head; the peers are not needed, LASER-VFL's head predicts from the label
party alone). The body names each peer's state (vfl_core.serving.peer_state).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from vfl_core.serving.gateway import Gateway

log = logging.getLogger(__name__)

LOADING, WARMING, READY, FAILED = "loading", "warming", "ready", "failed"


class Readiness:
    """The phase of one serving party, and the gateway once it is loaded."""

    def __init__(self, party: str, on_change: Callable[[bool], None] | None = None) -> None:
        self.party = party
        self.phase = LOADING
        self.why = ""  # a failed warm-up: why
        self.gateway: Gateway | None = None
        self._on_change = [on_change] if on_change is not None else []
        self._lock = threading.Lock()

    @property
    def ready(self) -> bool:
        return self.phase == READY

    def listen(self, on_change: Callable[[bool], None]) -> None:
        """Call `on_change(ready)` now and at every change."""
        with self._lock:
            self._on_change.append(on_change)
        on_change(self.ready)

    def set(self, phase: str, why: str = "") -> None:
        with self._lock:
            self.phase, self.why = phase, why
            listeners = list(self._on_change)
        log.info("party %s: %s%s", self.party, phase, f" ({why})" if why else "")
        for listener in listeners:
            listener(phase == READY)

    def describe(self) -> tuple[bool, dict[str, object]]:
        """(ready, the readiness body)."""
        body: dict[str, object] = {"ready": self.ready, "phase": self.phase, "party": self.party}
        if self.why:
            body["why"] = self.why
        gateway = self.gateway
        if gateway is not None:
            body["own_predictor"] = self.ready
            body["peers"] = gateway.peer_health()
        return self.ready, body
