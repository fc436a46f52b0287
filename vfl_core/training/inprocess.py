"""The in-process transport: parties are objects in this process, calls are method calls.

It behaves like the gRPC transport as far as the engine can tell: a party that refuses a call
(ProtocolError) is simply absent from the answer, and every answer is a copy, so no party holds
a reference to another party's arrays. Embeddings and gradients are rounded to the run's wire
dtype (vfl_core.model.quantize) exxactly where the gRPC transport encodes them: a party's embedding
and
its head's gradients as they leave it, the embeddings and the summed gradient as the coordinator
sends them on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, TypeVar

import numpy as np

from vfl_core.errors import ConfigError, VflError
from vfl_core.methods.record import copy_header
from vfl_core.methods.registry import method_spec
from vfl_core.methods.steps import decode_call, decode_result, encode_call, encode_result
from vfl_core.model.quantize import round_trip
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
    TrainCall,
    TrainResult,
)
from vfl_core.training.party import Party

log = logging.getLogger(__name__)
C = TypeVar("C")
R = TypeVar("R")


class InProcessTransport:
    def __init__(
        self,
        parties: Mapping[int, Party],
        saver: Callable[[Party, int], None] | None = None,
        wire_dtype: str | None = None,
    ) -> None:
        """`saver(party, round_id)` writes a party's checkpoint; without one, checkpoints are
        no-ops (a simulation keeps its parties in memory). `wire_dtype`: how embeddings and
        gradients travel (default: the parties' TrainConfig.wire_dtype)."""
        self.parties = dict(sorted(parties.items()))
        self.saver = saver
        if wire_dtype is None:
            configs = {p.config.wire_dtype for p in self.parties.values()} or {"float32"}
            if len(configs) > 1:
                raise ConfigError(f"parties disagree on the wire dtype: {sorted(configs)}")
            wire_dtype = configs.pop()
        self.wire_dtype = wire_dtype

    def infos(self) -> dict[int, PartyInfo]:
        return {b: p.info for b, p in self.parties.items()}

    def id_hashes(self, split: str, blocks: list[int]) -> dict[int, list[bytes]]:
        return self._fan_out({b: split for b in blocks}, lambda p, s: list(p.id_hashes(s)))

    def class_weights(self, block: int, split: str) -> np.ndarray | None:
        return self.parties[block].class_weights(split)

    def validation_strata(self, block: int) -> np.ndarray | None:
        return self.parties[block].validation_strata()

    def embed(self, calls: dict[int, EmbedCall]) -> dict[int, np.ndarray]:
        return self._fan_out(calls, lambda p, c: self._wire(p.embed(c)).copy())

    def fuse(self, calls: dict[int, FuseCall]) -> dict[int, FuseResult]:
        return self._fan_out(calls, lambda p, c: self._received(p.fuse(self._sent_fuse(c))))

    def backward(self, calls: dict[int, BackwardCall]) -> set[int]:
        return set(self._fan_out(calls, lambda p, c: p.backward(self._sent_backward(c))))

    def train(self, calls: dict[int, TrainCall]) -> Callable[[], dict[int, TrainResult]]:
        """Runs the calls at once, in block order (what the engine relies on in any transport:
        each party sees its calls in the order they were started)."""

        def train(party: Party, call: TrainCall) -> TrainResult:
            sent = TrainCall(
                tuple(self._sent_backward(c) for c in call.backward),
                tuple(self._sent_fuse(c) for c in call.fuse),
                call.embed,
            )
            r = party.train(sent)
            fused = {k: self._received(f) for k, f in r.fused.items()}
            embeddings = {k: self._wire(e).copy() for k, e in r.embeddings.items()}
            return TrainResult(r.stepped, fused, embeddings, r.stopped)

        answers = self._fan_out(calls, train)
        return lambda: answers

    def predict(self, calls: dict[int, PredictCall]) -> dict[int, np.ndarray]:
        def predict(party: Party, call: PredictCall) -> np.ndarray:
            return party.predict(replace(call, embeddings=self._wire_map(call.embeddings)))

        return self._fan_out(calls, predict)

    def _wire(self, array: np.ndarray) -> np.ndarray:
        """What the receiver of `array` gets (itself when the wire is lossless)."""
        return round_trip(array, self.wire_dtype)

    def _wire_map(self, arrays: Mapping[int, np.ndarray]) -> dict[int, np.ndarray]:
        return {b: self._wire(a) for b, a in arrays.items()}

    def _sent_fuse(self, call: FuseCall) -> FuseCall:
        return replace(call, embeddings=self._wire_map(call.embeddings))

    def _sent_backward(self, call: BackwardCall) -> BackwardCall:
        """The summed gradient rounded as the coordinator sends it; the heads' unsummed parts
        (each already rounded as its head sent it) passed on as copies, for the party to add."""
        grad = None if call.grad is None else self._wire(call.grad)
        return replace(call, grad=grad, parts=tuple(p.copy() for p in call.parts))

    def _received(self, result: FuseResult) -> FuseResult:
        return FuseResult(result.loss, self._wire_map(result.grads))

    def score(self, block: int, call: ScoreCall) -> ScoreResult | None:
        return self._fan_out({block: call}, Party.score).get(block)

    def checkpoint(self, round_id: int, blocks: list[int]) -> set[int]:
        saver = self.saver
        if saver is None:
            return set()
        return set(self._fan_out({b: round_id for b in blocks}, lambda p, r: saver(p, r)))

    def snapshot(self, round_id: int, blocks: list[int], restore: bool) -> set[int]:
        def snapshot(party: Party, r: int) -> bool:
            return party.restore_snapshot(r) if restore else party.keep_snapshot(r)

        done = self._fan_out({b: round_id for b in blocks}, snapshot)
        return {b for b, ok in done.items() if ok}

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

    def step(self, method: str, step: str, calls: Mapping[int, Any]) -> dict[int, Any]:
        """A method's step, through the same schema checks as over gRPC: each call is packed
        into a record, copied (no party holds another's memory), checked against the request
        schema and rebuilt before the party's handler sees it; the answer likewise."""
        spec = method_spec(method).step(step)

        def run(party: Party, call: Any) -> Any:
            header, record = encode_call(spec, call)
            dims = party.spec.step_dims(party.config) if party.config.method == method else {}
            sent, bound = decode_call(spec, copy_header(header), record.copy(), dims)
            answer = encode_result(spec, party.step(method, step, sent)).copy()
            return decode_result(spec, answer, call, bound)

        return self._fan_out(calls, run)

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
