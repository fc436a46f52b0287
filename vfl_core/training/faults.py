"""Fault injection for any transport: parties that fail and come back, and lost messages.

`FaultyTransport` wraps a `Transport` (the in-process one for simulations and benchmarks, the
gRPC one for a real federation) and, at each training round, lets every party that is up fail
with probability `fail_rate` (R_d) and every failed party come back with probability
`rejoin_rate` (R_u): the "guest loss" model of the DVFL paper. A failed party receives no call of
the round and answers none, exactly like a dead process. When it comes back it keeps its weights
(a reconnection, not a restart) and is reported by `rejoined()`, as a restarted client reports
itself by registering again. Independently, each call of a training round is lost with
probability `link_loss` (a lossy link between that party and the coordinator).

Decoupled VFL (vfl_core.methods.dvfl.nets) has three kinds of entity that can fail, `entity`:
- "guest" (the default, and the only kind for the other methods): the party itself for the
  other methods; for dvfl only its guest, whose steps are dropped (it writes nothing), while the
  host replica and the owner in the same process go on;
- "host": a dvfl host replica, whose steps and outputs are dropped (its guest goes on);
- "link": the link from guest k to host h, over which that guest's writes are lost.
The up/down process is the same for each kind, over the blocks (guest, host) or the K x K links,
drawn in that order from the round's FAULTS stream: a guest and a host failure run of one seed
fail the same blocks at the same rounds. `spare` blocks never fail (for links: the links from
a spare guest).

Every draw comes from (seed, Stream.FAULTS, round, ...), so a run's faults do not depend on the
transport, on timing or on how often the engine asks. Inference calls pass untouched unless
`at_inference` is set.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, Literal, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from vfl_core.errors import ConfigError
from vfl_core.methods.dlvm.messages import DecodeCall, DlvmBackwardCall, StepCall
from vfl_core.methods.dvfl.messages import (
    GuestCall,
    HostCall,
    HostOutputCall,
    OwnerFeedCall,
    OwnerTrainCall,
)
from vfl_core.methods.registry import REGISTRY, method_spec
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

_PHASES = {
    "embed": 1,
    "fuse": 2,
    "backward": 3,
    "checkpoint": 4,
    "guest": 5,
    "host": 6,
    "host output": 7,
    "owner feed": 8,
    "owner train": 9,
}
Entity = Literal["guest", "host", "link"]
ENTITIES: tuple[str, ...] = ("guest", "host", "link")
Unit = int | tuple[int, int]  # a block (guest or host) or a link (guest, host)
_PHASES |= {
    "dlvm_decode": 20,
    "dlvm_step": 21,
    "dlvm_backward": 22,
}  # vfl_core.methods.dlvm.program


# How each step of DVFL and DLVM fails: FaultyTransport's method for it.
_STEP_FAULTS = {
    "GuestStep": "_guest_step",
    "HostStep": "_host_step",
    "HostOutput": "_host_output",
    "OwnerFeed": "_owner_feed",
    "OwnerTrain": "_owner_train",
    "DlvmDecode": "_dlvm_decode",
    "DlvmStep": "_dlvm_step",
    "DlvmPredict": "_dlvm_predict",
    "DlvmBackward": "_dlvm_backward",
}


class FaultConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    fail_rate: float = Field(0.0, ge=0, le=1)  # R_d: an up party fails at a round
    rejoin_rate: float = Field(1.0, ge=0, le=1)  # R_u: a failed party comes back at a round
    link_loss: float = Field(0.0, ge=0, le=1)  # one call of a training round is lost
    at_inference: bool = False  # also fail parties during evaluation and prediction
    # Blocks that never fail (DVFL's guest loss: the host holding the labels stays up).
    spare: tuple[int, ...] = ()
    entity: Entity = "guest"  # what fails: a guest (a party), a dvfl host, a dvfl link

    @property
    def active(self) -> bool:
        return self.fail_rate > 0 or self.link_loss > 0


def check_faults(faults: FaultConfig, method: str) -> None:
    """Host and link failures exist only where there are hosts and links (the method's spec
    lists what can fail)."""
    if faults.entity in method_spec(method).fault_entities:
        return
    able = [name for name, spec in REGISTRY.items() if faults.entity in spec.fault_entities]
    raise ConfigError(
        f"fault entity {faults.entity!r} needs --method {' or '.join(able)} (method {method} "
        "has no hosts or guest-host links; its parties fail with entity 'guest')"
    )


class FaultyTransport:
    def __init__(self, inner: Transport, faults: FaultConfig, seed: int) -> None:
        self.inner = inner
        self.faults = faults
        self.seed = seed
        self.down: set[Unit] = set()  # blocks (guest, host) or links (guest, host) that are down
        self.events: list[tuple[int, Unit, str]] = []  # (round, unit, "failed" | "back")
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
        for unit in self._units():
            u = gen.random()
            if unit in self.down and u < self.faults.rejoin_rate:
                self.down.discard(unit)
                if isinstance(unit, int):
                    self._back.add(unit)
                self.events.append((round_id, unit, "back"))
            elif unit not in self.down and u < self.faults.fail_rate:
                guest = unit if isinstance(unit, int) else unit[0]
                if guest in self.faults.spare:  # drawn all the same: others' draws stay put
                    continue
                self.down.add(unit)
                if isinstance(unit, int):
                    self._back.discard(unit)
                self.events.append((round_id, unit, "failed"))
                log.info("fault: %s %s fails at round %d", self.faults.entity, unit, round_id)

    def _units(self) -> list[Unit]:
        blocks = sorted(self.inner.infos())
        if self.faults.entity == "link":
            return [(k, h) for k in blocks for h in blocks]
        return list(blocks)

    def _down(self, entity: str) -> set[Unit]:
        """The blocks of this kind of entity that are down now (none if another kind fails)."""
        return self.down if self.faults.entity == entity else set()

    def _deliver(self, calls: Mapping[int, C], round_id: int, phase: str) -> dict[int, C]:
        """The calls that reach a live party over a link that does not lose them."""
        down = self._down("guest") if phase in ("embed", "fuse", "backward", "guest") else set()
        if phase in ("host", "host output"):
            down = self._down("host")
        out = {b: c for b, c in calls.items() if b not in down}
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
        return self.inner.embed({b: c for b, c in calls.items() if b not in self._down("guest")})

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

    # ------------------------------------------------------------------ a method's own steps
    def step(self, method: str, step: str, calls: Mapping[int, Any]) -> dict[int, Any]:
        """The calls of a method's step that reach their party: DVFL's and DLVM's steps fail
        as below; another method's steps (a plug-in's) pass untouched."""
        faulted = getattr(self, _STEP_FAULTS.get(step, ""), None)
        delivered = faulted(calls) if calls and faulted is not None else dict(calls)
        return self.inner.step(method, step, delivered)

    # Decoupled VFL
    def _guest_step(self, calls: Mapping[int, GuestCall]) -> dict[int, GuestCall]:
        round_id = next(iter(calls.values())).round_id
        self.advance(round_id)
        return self._deliver(calls, round_id, "guest")

    def _host_step(self, calls: Mapping[int, HostCall]) -> dict[int, HostCall]:
        round_id = next(iter(calls.values())).round_id
        self.advance(round_id)
        links = self._down("link")
        kept = {
            h: replace(c, writes={k: a for k, a in c.writes.items() if (k, h) not in links})
            for h, c in calls.items()
        }
        return self._deliver(kept, round_id, "host")

    def _host_output(self, calls: Mapping[int, HostOutputCall]) -> dict[int, HostOutputCall]:
        call = next(iter(calls.values()))
        if call.from_registers:  # the owner's transfer: part of training
            self.advance(call.request_id)
            return self._deliver(calls, call.request_id, "host output")
        if self.faults.at_inference:
            return {h: c for h, c in calls.items() if h not in self._down("host")}
        return dict(calls)

    def _owner_feed(self, calls: Mapping[int, OwnerFeedCall]) -> dict[int, OwnerFeedCall]:
        round_id = next(iter(calls.values())).round_id
        self.advance(round_id)
        return self._deliver(calls, round_id, "owner feed")

    def _owner_train(self, calls: Mapping[int, OwnerTrainCall]) -> dict[int, OwnerTrainCall]:
        round_id = next(iter(calls.values())).round_id
        self.advance(round_id)
        return self._deliver(calls, round_id, "owner train")

    def predict(self, calls: dict[int, PredictCall]) -> dict[int, np.ndarray]:
        if self.faults.at_inference:
            calls = {b: c for b, c in calls.items() if b not in self._down("guest")}
        return self.inner.predict(calls)

    def score(self, block: int, call: ScoreCall) -> ScoreResult | None:
        return self.inner.score(block, call)

    # Latent-variable VFL: its training phases fail like Fuse/Backward, inference like Predict
    def _dlvm_decode(self, calls: Mapping[int, DecodeCall]) -> dict[int, DecodeCall]:
        rounds = {c.round_id for c in calls.values() if c.split == "train"}
        return self._dlvm_calls(calls, rounds, "dlvm_decode")

    def _dlvm_step(self, calls: Mapping[int, StepCall]) -> dict[int, StepCall]:
        return self._dlvm_calls(calls, {c.round_id for c in calls.values()}, "dlvm_step")

    def _dlvm_predict(self, calls: Mapping[int, StepCall]) -> dict[int, StepCall]:
        return self._dlvm_calls(calls, set(), "dlvm_step")

    def _dlvm_backward(self, calls: Mapping[int, DlvmBackwardCall]) -> dict[int, DlvmBackwardCall]:
        return self._dlvm_calls(calls, {c.round_id for c in calls.values()}, "dlvm_backward")

    def _dlvm_calls(self, calls: Mapping[int, C], rounds: set[int], phase: str) -> dict[int, C]:
        """Training calls (of one round) reach live parties over the lossy link; inference
        calls reach the live parties when faults apply at inference."""
        if rounds:
            return self._deliver(calls, min(rounds), phase)
        if self.faults.at_inference:
            return {b: c for b, c in calls.items() if b not in self.down}
        return dict(calls)

    def id_hashes(self, split: str, blocks: list[int]) -> dict[int, list[bytes]]:
        return self.inner.id_hashes(split, blocks)

    def class_weights(self, block: int, split: str) -> np.ndarray | None:
        return self.inner.class_weights(block, split)

    def validation_strata(self, block: int) -> np.ndarray | None:
        return self.inner.validation_strata(block)

    def checkpoint(self, round_id: int, blocks: list[int]) -> set[int]:
        down = self._down("guest")
        return self.inner.checkpoint(round_id, [b for b in blocks if b not in down])

    def snapshot(self, round_id: int, blocks: list[int], restore: bool) -> set[int]:
        return self.inner.snapshot(round_id, [b for b in blocks if b not in self.down], restore)

    def rejoined(self) -> set[int]:
        back, self._back = self._back, set()
        return back | self.inner.rejoined()

    def heal(self) -> None:
        """Bring every failed party back now (e.g. when training ends)."""
        self._back |= {u for u in self.down if isinstance(u, int)}
        self.down.clear()

    def counts(self) -> dict[str, int]:
        return {
            "failures": sum(e[2] == "failed" for e in self.events),
            "comebacks": sum(e[2] == "back" for e in self.events),
            "lost_calls": self.lost,
        }
