"""Who may call a serving party, and how much each caller may claim of it.

Why a label party answers embeddings to no one unless told. Its embeddings are a representation
of its features trained towards its labels; in training they reach only the heads (the parties
with labels), never a feature-only party. Any party's certificate could once ask a label
party's `ServeEmbed` for any keyed ID (every party knows the federation secret): in an
attack run, a feature party collected the gateway's embeddings of all 514 IDs it keyed and,
with 20 known labels, scored label AUC 0.667 (0.562 from its own block). A label party now
answers `ServeEmbed` only to the parties named with `--embed-for` (another label party's
gateway), by default to none; a feature-only party by default to any party's certificate
(only label parties are gateways), or with `--embed-for` only to those named.

Why the limits. One certificate could hold all of a server's calls at once (its in-flight limit
was the server's, 256) with stalled bodies, and so take a party out of every prediction: the
server now takes twice what one caller may hold (a gateway keeps its 256). And it read requests
of up to the channel's 128 MiB where the largest honest one is a few hundred KiB: two 100 MiB
`ServeEmbed`s left a feature party 260-330 MB larger; now refused from the length prefix."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from vfl_wire.security import COORDINATOR, HEALTH_SERVICE, OPERATOR

SERVING_SERVICE = "vfl.v1.Serving"
# Calls one certificate (with --insecure: one connection) may hold at once: a gateway (or an
# application with the operator's certificate) holds each up to its deadline, as many as it has
# callers (or, batching, its peer's round trip over the batching window).
MAX_INFLIGHT_PER_PEER = 256
# Calls served at once: twice what one caller may hold, so that one caller leaves half.
MAX_CONCURRENT_RPCS = 2 * MAX_INFLIGHT_PER_PEER
# The largest request: a ServeEmbed of 4096 keys is 139 KiB, a ServePredict as large as the
# HTTP endpoint takes (1 MiB of JSON) a little less.
MAX_REQUEST_BYTES = 1024 * 1024


@dataclass(frozen=True)
class ServingPolicy:
    """The guard's policy (vfl_wire.security.Policy) of a serving party.

    `party`: this party's id; `embed_callers`: the parties whose `ServeEmbed` it answers, None
    for any party's certificate. The operator's certificate may ask `ServePredict` (answered by
    gateways only)."""

    party: str
    embed_callers: frozenset[str] | None = None

    @classmethod
    def of(cls, party: str, has_head: bool, embed_for: Collection[str] | None) -> ServingPolicy:
        """`embed_for` (--embed-for) when given; else a label party answers embeddings to no
        party, a feature party to any."""
        if embed_for is not None:
            return cls(party, frozenset(embed_for))
        return cls(party, frozenset() if has_head else None)

    def __call__(self, peer: str, service: str, rpc: str) -> str | None:
        if service == HEALTH_SERVICE:
            return None
        if service == SERVING_SERVICE and rpc == "ServePredict" and peer == OPERATOR:
            return None
        if service != SERVING_SERVICE or rpc != "ServeEmbed" or peer in (COORDINATOR, OPERATOR):
            return f"{peer!r} may not call {service}/{rpc}"
        if self.embed_callers is None or peer in self.embed_callers:
            return None
        allowed = ", ".join(sorted(self.embed_callers)) or "none"
        return (
            f"{peer!r} may not call ServeEmbed: {self.party} answers embeddings only to the "
            f"parties of its --embed-for ({allowed}; a label party's default: none)"
        )
