"""Fault injection for any transport: parties that fail and come back, and lost messages.

`FaultyTransport` wraps a `Transport` (the in-process one for simulations and benchmarks, the
gRPC one for a real federation) and, at each training round, lets every party that is up fail
with probability `fail_rate` (R_d) and every failed party come back with probability
`rejoin_rate` (R_u): the "guest loss" model of the DVFL paper. A failed party receives no call of
the round and answers none, exactly like a dead process. When it comes back it keeps its weights
(a reconnection, not a restart) and is reported by `rejoined()`, as a restarted client reports
itself by registering again. Independently, each call of a training round is lost with
probability `link_loss` (a lossy link between that party and the coordinator).

Every draw comes from (seed, Stream.FAULTS, round, ...), so a run's faults do not depend on the
transport, on timing or on how often the engine asks. Inference calls pass untouched unless
`at_inference` is set.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from vfl_core.protocol import (
    BackwardCall,
    EmbedCall,
    FuseCall,
    FuseResult,
    PartyInfo,
    PredictCall,
    ScoreCall,
    ScoreResult,
    TrainCall,
    TrainResult,
    Transport,
)
from vfl_core.seeding import Stream, rng

log = logging.getLogger(__name__)
C = TypeVar("C")

_PHASES = {"embed": 1, "fuse": 2, "backward": 3, "checkpoint": 4}


class FaultConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    fail_rate: float = Field(0.0, ge=0, le=1)  # R_d: an up party fails at a round
    rejoin_rate: float = Field(1.0, ge=0, le=1)  # R_u: a failed party comes back at a round
    link_loss: float = Field(0.0, ge=0, le=1)  # one call of a training round is lost
    at_inference: bool = False  # also fail parties during evaluation and prediction
    # Blocks that never fail (DVFL's guest loss: the host holding the labels stays up).
    spare: tuple[int, ...] = ()

    @property
    def active(self) -> bool:
        return self.fail_rate > 0 or self.link_loss > 0


class FaultyTransport:
    def __init__(self, inner: Transport, faults: FaultConfig, seed: int) -> None:
        self.inner = inner
        self.faults = faults
        self.seed = seed
        self.down: set[int] = set()
        self.events: list[tuple[int, int, str]] = []  # (round, block, "failed" | "back")
        self.lost: int = 0  # calls dropped by link loss
        self._round = -1
        self._back: set[int] = set()

    def __getattr__(self, name: str) -> Any:  # anything not faulted (alignment, PSI, close)
        return getattr(self.inner, name)

    # ------------------------------------------------------------------ the fault process
    def advance(self, round_id: int) -> None:
        """Draw this round's failures and comebacks (once per round, in block order)."""
        if round_id <= self._round:
            return
        self._round = round_id
        gen = rng(self.seed, Stream.FAULTS, round_id)
        for block in sorted(self.inner.infos()):
            u = gen.random()
            if block in self.down and u < self.faults.rejoin_rate:
                self.down.discard(block)
                self._back.add(block)
                self.events.append((round_id, block, "back"))
            elif block not in self.down and u < self.faults.fail_rate:
                if block in self.faults.spare:  # drawn all the same: others' draws stay put
                    continue
                self.down.add(block)
                self._back.discard(block)
                self.events.append((round_id, block, "failed"))
                log.info("fault: block %d fails at round %d", block, round_id)

    def _deliver(self, calls: Mapping[int, C], round_id: int, phase: str) -> dict[int, C]:
        """The calls that reach a live party over a link that does not lose them."""
        out = {b: c for b, c in calls.items() if b not in self.down}
        if self.faults.link_loss > 0 and out:
            gen = rng(self.seed, Stream.FAULTS, round_id, _PHASES[phase])
            draws = dict(zip(sorted(calls), gen.random(len(calls)), strict=True))
            kept = {b: c for b, c in out.items() if draws[b] >= self.faults.link_loss}
            self.lost += len(out) - len(kept)
            out = kept
        return out

    # ------------------------------------------------------------------ Transport interface
    def infos(self) -> dict[int, PartyInfo]:
        return self.inner.infos()

    def embed(self, calls: dict[int, EmbedCall]) -> dict[int, np.ndarray]:
        train = any(c.train for c in calls.values())
        if not calls or not (train or self.faults.at_inference):
            return self.inner.embed(calls)
        round_id = next(iter(calls.values())).round_id
        if train:
            self.advance(round_id)
            return self.inner.embed(self._deliver(calls, round_id, "embed"))
        return self.inner.embed({b: c for b, c in calls.items() if b not in self.down})

    def fuse(self, calls: dict[int, FuseCall]) -> dict[int, FuseResult]:
        if not calls:
            return {}
        round_id = next(iter(calls.values())).round_id
        return self.inner.fuse(self._deliver(calls, round_id, "fuse"))

    def backward(self, calls: dict[int, BackwardCall]) -> set[int]:
        if not calls:
            return set()
        round_id = next(iter(calls.values())).round_id
        return self.inner.backward(self._deliver(calls, round_id, "backward"))

    def train(self, calls: dict[int, TrainCall]) -> Callable[[], dict[int, TrainResult]]:
        """Pipelined calls, faulted step by step as the sequential engine's calls are: each
        round's Backward with the failures as they stood, then each new round's failures drawn
        (advance) before its Embed is delivered; Fuse with its round's draws."""
        kept: dict[int, dict[str, list]] = {
            b: {"backward": [], "fuse": [], "embed": []} for b in calls
        }
        for phase in ("backward", "fuse", "embed"):
            steps = [(b, s) for b, c in calls.items() for s in getattr(c, phase)]
            for round_id in sorted({s.round_id for _, s in steps}):
                if phase == "embed":
                    self.advance(round_id)
                these = {b: s for b, s in steps if s.round_id == round_id}
                for b, s in self._deliver(these, round_id, phase).items():
                    kept[b][phase].append(s)
        reduced = {
            b: TrainCall(**{k: tuple(v) for k, v in parts.items()}) for b, parts in kept.items()
        }
        return self.inner.train({b: c for b, c in reduced.items() if c})

    def predict(self, calls: dict[int, PredictCall]) -> dict[int, np.ndarray]:
        if self.faults.at_inference:
            calls = {b: c for b, c in calls.items() if b not in self.down}
        return self.inner.predict(calls)

    def score(self, block: int, call: ScoreCall) -> ScoreResult | None:
        return self.inner.score(block, call)

    def id_hashes(self, split: str, blocks: list[int]) -> dict[int, list[bytes]]:
        return self.inner.id_hashes(split, blocks)

    def class_weights(self, block: int, split: str) -> np.ndarray | None:
        return self.inner.class_weights(block, split)

    def checkpoint(self, round_id: int, blocks: list[int]) -> set[int]:
        return self.inner.checkpoint(round_id, [b for b in blocks if b not in self.down])

    def snapshot(self, round_id: int, blocks: list[int], restore: bool) -> set[int]:
        return self.inner.snapshot(round_id, [b for b in blocks if b not in self.down], restore)

    def rejoined(self) -> set[int]:
        back, self._back = self._back, set()
        return back | self.inner.rejoined()

    def heal(self) -> None:
        """Bring every failed party back now (e.g. when training ends)."""
        self._back |= self.down
        self.down.clear()

    def counts(self) -> dict[str, int]:
        return {
            "failures": sum(e[2] == "failed" for e in self.events),
            "comebacks": sum(e[2] == "back" for e in self.events),
            "lost_calls": self.lost,
        }
