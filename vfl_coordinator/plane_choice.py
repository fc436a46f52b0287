"""`--data-plane auto` (the default on tables): the coordinator chooses the data plane at run start.

Direct (docs/data-plane.md) when the run can use it and every party reaches, at the address it
registered, each party it would push tensors to: every party a label party (its embeddings),
a label party every party (the gradients). The coordinator asks each party to connect to those
peers (a probe: a Round call that only connects, the TLS handshake and the certificate's name
included) and waits `PROBE_S` at most. Otherwise the relay, which needs only that the parties
reach the coordinator. Either way one log line says which and why; the parties serve both.
"""

from __future__ import annotations

import logging

from vfl_coordinator.config import CoordinatorConfig
from vfl_coordinator.registry import Registry
from vfl_coordinator.transport import GrpcTransport
from vfl_core.auto_rounds import FAULTS
from vfl_core.config import MAX_DIRECT_STALENESS

log = logging.getLogger(__name__)

PROBE_S = 5.0  # how long a party may take to connect to its peers


def choose(config: CoordinatorConfig, registry: Registry, transport: GrpcTransport) -> str:
    """The data plane of the run, "relay" or "direct" (as asked, unless "auto"; unset: "auto"
    for tabular parties, the relay for images, TrainConfig.plane)."""
    members = registry.members().values()
    plane = config.train.plane(all(len(m.info.feature_shape) == 1 for m in members))
    if plane != "auto":
        return plane
    plane, why = _auto(config, registry, transport)
    log.info("data plane: %s (--data-plane auto: %s)", plane, why)
    return plane


def relay_only(config: CoordinatorConfig) -> str | None:
    """Why the run needs the relay whatever the network (None: it does not)."""
    train = config.train
    if config.faults.active:
        return FAULTS
    if train.spec.program is not None:
        return f"method {train.method} runs steps of its own, which only the relay carries"
    if (train.staleness or 0) > MAX_DIRECT_STALENESS:
        return f"--staleness above {MAX_DIRECT_STALENESS} overlaps rounds on the relay only"
    if not config.pipeline:
        return "--no-pipeline runs the relay's three calls per round"
    if train.encrypt_relay:
        return "--encrypt-relay asks for the sealed relay"
    return None


def _auto(
    config: CoordinatorConfig, registry: Registry, transport: GrpcTransport
) -> tuple[str, str]:
    why = relay_only(config)
    if why is not None:
        return "relay", why
    members = registry.members()
    labels = {b for b, m in members.items() if m.info.has_labels}
    targets = {
        b: tuple(sorted(k for k in members if k != b and (b in labels or k in labels)))
        for b in sorted(members)
    }
    reached = transport.probe(targets, PROBE_S)
    for block, peers in sorted(targets.items()):
        who = members[block].info.party_id
        if block not in reached:
            return "relay", f"party {who} did not answer the probe of its peers"
        missed = sorted(set(peers) - reached[block])
        if missed:
            far = ", ".join(f"{members[k].info.party_id} at {members[k].address}" for k in missed)
            return "relay", f"party {who} cannot reach {far} within {PROBE_S:g}s"
    return "direct", "every party reaches the parties it exchanges tensors with"
