"""Feature-only parties whose sample IDs matched no other party's are told so, and let go.

Such a party can take part in no training round (no label party holds any of its samples) and
would wait the whole run for nothing, its own log silent about why. Once the training split is
aligned, the coordinator sends it a Shutdown whose reason says what happened
(vfl_core.training.alignment.unmatched_reason); the party logs it and exits with it as an error.
A label party that shares nothing still trains its own head on its own rows; it is told the
same at the end of the run, instead of the run's ending, and exits with it as an error too.
"""

from __future__ import annotations

import logging

from vfl_coordinator.transport import GrpcTransport
from vfl_core.lifecycle import PhaseObserver
from vfl_core.training.alignment import unmatched_reason
from vfl_core.training.engine import Federation

log = logging.getLogger(__name__)


class UnmatchedParties(PhaseObserver):
    """Tells the feature-only parties whose training IDs matched nothing, when training starts."""

    def __init__(self, transport: GrpcTransport) -> None:
        self.transport = transport
        self.told: set[int] = set()  # blocks told (their run has ended)
        self.alone: dict[int, str] = {}  # label blocks that shared nothing -> what to tell them

    def phase_started(self, fed: Federation, phase: str) -> None:
        if phase != "training" or "train" not in fed.alignments:
            return
        alignment = fed.alignments["train"]
        for block in alignment.unshared():
            rows = int((alignment.rows[block] >= 0).sum())
            if fed.infos[block].has_labels:  # it trains alone: told when the run ends
                self.alone[block] = unmatched_reason("train", rows)
                continue
            if block in self.told:
                continue
            if self.transport.shutdown([block], unmatched_reason("train", rows)):
                self.told.add(block)
                log.warning(
                    "block %d (%s) matched no sample of another party: told so and let go",
                    block,
                    fed.infos[block].party_id,
                )

    def tell_the_rest(self) -> set[int]:
        """At the end of the run: tell each label party that shared nothing why its run was
        not a federation; returns those that heard it."""
        told = set()
        for block, reason in sorted(self.alone.items()):
            if block not in self.told and self.transport.shutdown([block], reason):
                told.add(block)
        self.told |= told
        return told
