"""The in-process transport: parties are objects in this process, calls are method calls.

It behaves like the gRPC transport as far as the engine can tell: a party that refuses a call
(ProtocolError) is simply absent from the answer, and every answer is a copy, so no party holds
a reference to another party's arrays.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TypeVar

import numpy as np

from vfl_core.dvfl_protocol import (
    GuestCall,
    GuestResult,
    HostCall,
    HostOutputCall,
    HostResult,
    OwnerFeedCall,
    OwnerTrainCall,
)
from vfl_core.errors import VflError
from vfl_core.party import Party
from vfl_core.protocol import (
    BackwardCall,
    EmbedCall,
    FuseCall,
    FuseResult,
    PartyInfo,
    PredictCall,
    PsiCall,
    ScoreCall,
    ScoreResult,
)

log = logging.getLogger(__name__)
C = TypeVar("C")
R = TypeVar("R")


class InProcessTransport:
    def __init__(
        self,
        parties: Mapping[int, Party],
        saver: Callable[[Party, int], None] | None = None,
    ) -> None:
        """`saver(party, round_id)` writes a party's checkpoint; without one, checkpoints are
        no-ops (a simulation keeps its parties in memory)."""
        self.parties = dict(sorted(parties.items()))
        self.saver = saver

    def infos(self) -> dict[int, PartyInfo]:
        return {b: p.info for b, p in self.parties.items()}

    def id_hashes(self, split: str, blocks: list[int]) -> dict[int, list[bytes]]:
        return self._fan_out({b: split for b in blocks}, lambda p, s: list(p.id_hashes(s)))

    def class_weights(self, block: int, split: str) -> np.ndarray | None:
        return self.parties[block].class_weights(split)

    def embed(self, calls: dict[int, EmbedCall]) -> dict[int, np.ndarray]:
        return self._fan_out(calls, lambda p, c: p.embed(c).copy())

    def fuse(self, calls: dict[int, FuseCall]) -> dict[int, FuseResult]:
        return self._fan_out(calls, Party.fuse)

    def backward(self, calls: dict[int, BackwardCall]) -> set[int]:
        return set(self._fan_out(calls, Party.backward))

    def predict(self, calls: dict[int, PredictCall]) -> dict[int, np.ndarray]:
        return self._fan_out(calls, Party.predict)

    def score(self, block: int, call: ScoreCall) -> ScoreResult | None:
        return self._fan_out({block: call}, Party.score).get(block)

    def checkpoint(self, round_id: int, blocks: list[int]) -> set[int]:
        saver = self.saver
        if saver is None:
            return set()
        return set(self._fan_out({b: round_id for b in blocks}, lambda p, r: saver(p, r)))

    def rejoined(self) -> set[int]:
        return set()  # parties in this process never leave

    def psi_blind(self, split: str, session: str, blocks: list[int]) -> dict[int, list[bytes]]:
        return self._fan_out({b: split for b in blocks}, lambda p, s: p.psi_blind(s, session))

    def psi_apply(self, calls: dict[int, PsiCall]) -> dict[int, list[bytes]]:
        return self._fan_out(calls, lambda p, c: p.psi_apply(c.split, c.session, c.points))

    def psi_keys(self, calls: dict[int, PsiCall]) -> set[int]:
        return set(
            self._fan_out(calls, lambda p, c: p.set_alignment_keys(c.split, c.points) or True)
        )

    # Decoupled VFL: each answer is a copy, as an answer off the wire would be
    def guest_step(self, calls: dict[int, GuestCall]) -> dict[int, GuestResult]:
        return self._fan_out(calls, Party.guest_step)

    def host_step(self, calls: dict[int, HostCall]) -> dict[int, HostResult]:
        return self._fan_out(calls, Party.host_step)

    def host_output(self, calls: dict[int, HostOutputCall]) -> dict[int, np.ndarray]:
        return self._fan_out(calls, lambda p, c: p.host_output(c).copy())

    def owner_feed(self, calls: dict[int, OwnerFeedCall]) -> set[int]:
        return set(self._fan_out(calls, lambda p, c: p.owner_feed(c) or True))

    def owner_train(self, calls: dict[int, OwnerTrainCall]) -> dict[int, float]:
        return self._fan_out(calls, Party.owner_train)

    def _fan_out(self, calls: Mapping[int, C], method: Callable[[Party, C], R]) -> dict[int, R]:
        answers: dict[int, R] = {}
        for block, call in sorted(calls.items()):
            party = self.parties.get(block)
            if party is None:
                continue
            try:
                answers[block] = method(party, call)
            except VflError as err:
                log.warning("block %d refused %s: %s", block, type(call).__name__, err)
        return answers
