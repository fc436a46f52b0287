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

from vfl_core.dlvm_protocol import (
    DecodeCall,
    Decoded,
    DlvmBackwardCall,
    PartyGrads,
    StepCall,
    StepResult,
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

    # Latent-variable VFL: each answer is a copy, as an answer off the wire would be
    def dlvm_decode(self, calls: dict[int, DecodeCall]) -> dict[int, Decoded]:
        return self._fan_out(calls, lambda p, c: _copy_decoded(p.dlvm_decode(c)))

    def dlvm_step(self, calls: dict[int, StepCall]) -> dict[int, StepResult]:
        return self._fan_out(calls, lambda p, c: _copy_step(p.dlvm_step(c)))

    def dlvm_predict(self, calls: dict[int, StepCall]) -> dict[int, np.ndarray]:
        return self._fan_out(calls, lambda p, c: p.dlvm_predict(c).copy())

    def dlvm_backward(self, calls: dict[int, DlvmBackwardCall]) -> set[int]:
        return set(self._fan_out(calls, lambda p, c: p.dlvm_backward(c) or True))

    def labelled_rows(self, block: int) -> np.ndarray | None:
        answer = self._fan_out({block: "train"}, Party.labelled_rows).get(block)
        return None if answer is None else answer.copy()

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


def _copy_decoded(answer: Decoded) -> Decoded:
    """A copy of a decoder's arrays (no party holds another party's memory)."""
    return Decoded(answer.log_lik.copy(), None if answer.grad is None else answer.grad.copy())


def _copy_step(answer: StepResult) -> StepResult:
    grads = {
        b: PartyGrads(
            None if g.log_lik is None else g.log_lik.copy(),
            None if g.expert is None else g.expert.copy(),
        )
        for b, g in answer.grads.items()
    }
    return StepResult(answer.loss, grads)
