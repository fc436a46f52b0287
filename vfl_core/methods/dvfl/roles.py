"""The three tiers of Decoupled VFL inside one party process: its guest, its host replica and,
at the label owner, the classifier (vfl_core.methods.dvfl.nets explains the method).

Mapping onto our processes: every `vfl-client` is a guest (its feature block) and also runs one
host replica (host h lives in party h, so a federation of K parties has K redundant hosts, the
paper's MNIST setup of four); the lowest label party is also the label owner. The coordinator
holds no weights: it schedules the rounds and relays guest activations to the hosts' registers
and host outputs to the owner. Killing a client therefore takes one guest and one host away;
the other hosts keep training and the owner learns on the hosts that remain.

Every tier answers a call of its current round again with the same answer (retries are safe)
and refuses an earlier round, like a Party's Embed/Fuse/Backward.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from vfl_core.data.learning_task import REGRESSION, output_width
from vfl_core.errors import ProtocolError, StaleRoundError
from vfl_core.methods.dvfl.messages import (
    GuestCall,
    GuestResult,
    HostCall,
    HostOutputCall,
    HostResult,
    OwnerFeedCall,
    OwnerTrainCall,
)
from vfl_core.methods.dvfl.nets import (
    Registers,
    build_autoencoder,
    build_classifier,
    check_index,
    concat_slots,
)
from vfl_core.methods.dvfl.owner_stop import OwnerStop
from vfl_core.methods.spec import RunConfig
from vfl_core.model.eager_optim import EagerSGD
from vfl_core.model.model_bank import make_optimizer
from vfl_core.model.reconstruction import reconstruction_loss
from vfl_core.protocol import EmbedCall
from vfl_core.seeding import Stream, derive_seed, rng

if TYPE_CHECKING:
    from vfl_core.methods.party_port import PartyPort


@dataclass
class _Once:
    """One tier's round bookkeeping: the current round again gets the cached answer (an
    identical retry), other content for it is refused, an earlier round is stale."""

    what: str
    last: int = -1
    key: bytes = b""
    result: Any = None

    def cached(self, round_id: int, key: bytes) -> Any:
        if round_id < self.last:
            raise StaleRoundError(f"{self.what} for round {round_id}, but it is at {self.last}")
        if round_id == self.last:
            if key != self.key:
                raise ProtocolError(f"{self.what} for round {round_id} repeated with other content")
            return self.result
        return None

    def done(self, round_id: int, key: bytes, result: Any) -> Any:
        self.last, self.key, self.result = round_id, key, result
        return result


def _key(*parts: object) -> bytes:
    """A digest of a call's content (arrays by their bytes), to recognise an identical retry."""
    h = hashlib.sha256()
    for part in parts:
        if isinstance(part, np.ndarray):
            h.update(str((part.dtype, part.shape)).encode())
            h.update(np.ascontiguousarray(part).tobytes())
        elif isinstance(part, Mapping):
            for k in sorted(part):
                h.update(str(k).encode())
                h.update(_key(part[k]))
        else:
            h.update(repr(part).encode())
    return h.digest()


@dataclass
class DvflRoles:
    """A party's guest and host replica, and its owner classifier once it is fed (label parties)."""

    party: PartyPort
    config: RunConfig = field(init=False)
    guest_once: _Once = field(init=False, default_factory=lambda: _Once("guest step"))
    host_once: _Once = field(init=False, default_factory=lambda: _Once("host step"))
    owner_once: _Once = field(init=False, default_factory=lambda: _Once("owner call"))

    def __post_init__(self) -> None:
        p = self.party
        self.config = p.config
        cfg, seed, device = p.config.dvfl, p.config.seed, p.device
        self.slots = p.data.meta.num_blocks  # guests per host = hosts per owner = K
        in_width = math.prod(p.data.meta.feature_shape)
        init = derive_seed(seed, Stream.INIT_REPRESENTATION, p.block)
        self.guest = build_autoencoder(in_width, cfg.guest_hidden, cfg.guest_dim, init).to(device)
        self.guest_opt = make_optimizer(self.guest, p.config)
        host_seed = derive_seed(seed, Stream.DVFL_INIT_HOST, p.block)
        width = self.slots * cfg.guest_dim
        self.host = build_autoencoder(width, cfg.host_hidden, cfg.host_dim, host_seed).to(device)
        self.host_opt = make_optimizer(self.host, p.config)
        self.registers: Registers | None = None
        self.owner: torch.nn.Module | None = None
        self.owner_opt: torch.optim.Optimizer | None = None
        # The owner's buffer: per train row and host, the code received last (zeros: none yet).
        self.owner_inputs: torch.Tensor | None = None  # (train rows, K, host_dim)
        self.owner_fed: torch.Tensor | None = None  # (train rows, K) bool
        patience = cfg.owner_patience
        self.owner_stop = (
            OwnerStop(patience, cfg.owner_validation, seed, cfg.owner_min_epochs)
            if patience > 0
            else None
        )

    # ------------------------------------------------------------------ guest
    def guest_step(self, call: GuestCall) -> GuestResult:
        key = _key(call.rows, call.digest, call.write)
        cached = self.guest_once.cached(call.round_id, key)
        if cached is not None:
            return cached
        x = self.party.batch("train", call.rows, call.digest)  # (B, *feature_shape)
        self.guest.train()
        self.guest_opt.zero_grad(set_to_none=True)
        code, recon = self.guest(x)  # (B, guest_dim), (B, F)
        loss = reconstruction_loss(recon, x.flatten(1))
        loss.backward()
        self.guest_opt.step()
        # The activations written are those of the step's forward pass (before the update).
        activations = self.party.to_wire(code) if call.write else None
        result = GuestResult(float(loss.detach()), activations)
        return self.guest_once.done(call.round_id, key, result)

    def embed(self, call: EmbedCall) -> np.ndarray:
        """The guest's activations of a batch, for inference only (it trains with GuestStep)."""
        if call.train:
            raise ProtocolError("dvfl guests train with GuestStep, not Embed")
        return self.party.to_wire(self.encode(self.party.batch(call.split, call.rows, call.digest)))

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """The guest's activations at inference: (B, *feature_shape) -> (B, guest_dim)."""
        self.guest.eval()
        with torch.no_grad():
            return self.guest(x)[0]

    # ------------------------------------------------------------------ host
    def host_step(self, call: HostCall) -> HostResult:
        key = _key(call.samples, call.index, call.writes, call.steps)
        cached = self.host_once.cached(call.round_id, key)
        if cached is not None:
            return cached
        # Everything is checked before the registers are made or touched.
        if self.registers is not None and self.registers.samples != call.samples:
            raise ProtocolError(
                f"host registers hold {self.registers.samples} samples, the call says "
                f"{call.samples}"
            )
        writes = self._parts(call.writes, len(call.index), self.config.dvfl.guest_dim, "write")
        if writes:
            check_index(call.index, call.samples, "host write")
        registers = self._registers(call.samples)
        for guest, values in writes.items():
            registers.write(call.index, guest, values)
        losses = [self._replay(registers, call.round_id, s) for s in range(call.steps)]
        taken = [v for v in losses if v is not None]
        result = HostResult(float(np.mean(taken)) if taken else 0.0, len(taken))
        return self.host_once.done(call.round_id, key, result)

    def _replay(self, registers: Registers, round_id: int, step: int) -> float | None:
        """One host autoencoder step on a batch drawn from the written registers."""
        filled = registers.filled()
        if filled.size == 0:
            return None
        gen = rng(self.config.seed, Stream.DVFL_REPLAY, round_id, self.party.block, step)
        size = min(self.config.batch_rows(filled.size), filled.size)
        batch = np.sort(gen.choice(filled, size=size))
        x, mask = registers.inputs(batch)  # (B, K * guest_dim) each
        self.host.train()
        self.host_opt.zero_grad(set_to_none=True)
        _, recon = self.host(x)
        loss = reconstruction_loss(recon, x, mask)  # only the slots that were ever written
        loss.backward()
        self.host_opt.step()
        return float(loss.detach())

    def host_output(self, call: HostOutputCall) -> np.ndarray:
        """(B, host_dim): the frozen host's code of its registers or of fresh activations."""
        size = len(call.index)
        if call.from_registers:
            if call.split != "train" or call.activations:
                raise ProtocolError("host output from registers: training samples only, no data")
            if self.registers is None:
                raise ProtocolError("host output from registers: nothing was written yet")
            self.registers.check_index(call.index, "host output")
            x, _ = self.registers.inputs(call.index)
        else:
            parts = self._parts(call.activations, size, self.config.dvfl.guest_dim, "activation")
            x = concat_slots(parts, self.slots, size, self.config.dvfl.guest_dim, self.party.device)
        self.host.eval()
        with torch.no_grad():
            return self.party.to_wire(self.host(x)[0])

    def _registers(self, samples: int) -> Registers:
        if self.registers is None:
            cfg = self.config.dvfl
            self.registers = Registers(samples, self.slots, cfg.guest_dim, self.party.device)
        elif self.registers.samples != samples:
            raise ProtocolError(
                f"host registers hold {self.registers.samples} samples, the call says {samples}"
            )
        return self.registers

    def _parts(
        self, arrays: Mapping[int, np.ndarray], size: int, dim: int, what: str
    ) -> dict[int, torch.Tensor]:
        """block -> (size, dim) tensor of one guest's activations or one host's codes, each
        checked (a block of the federation, dtype, shape, finite)."""
        for block in arrays:
            if not 0 <= block < self.slots:
                raise ProtocolError(f"{what} of block {block}: no such block (K={self.slots})")
        return {
            b: self.party.from_wire(a, f"{what} of block {b}", size, dim)
            for b, a in sorted(arrays.items())
        }

    # ------------------------------------------------------------------ owner
    def owner_feed(self, call: OwnerFeedCall) -> None:
        key = _key(call.rows, call.digest, call.outputs)
        if self.owner_once.cached(call.round_id, key) is not None:
            return
        self.party.check_digest("train", call.rows, call.digest)
        parts = self._parts(call.outputs, len(call.rows), self.config.dvfl.host_dim, "host output")
        self._owner()
        assert self.owner_inputs is not None and self.owner_fed is not None
        rows = torch.as_tensor(call.rows, device=self.party.device)
        for host, codes in parts.items():  # a host that did not answer keeps its last codes
            self.owner_inputs[rows, host] = codes
            self.owner_fed[rows, host] = True
        self.owner_once.done(call.round_id, key, True)

    def owner_train(self, call: OwnerTrainCall) -> float:
        key = _key("train", call.epoch)
        cached = self.owner_once.cached(call.round_id, key)
        if cached is not None:
            return float(cached)
        net, opt = self._owner()
        assert self.owner_inputs is not None and self.owner_fed is not None
        rows = np.flatnonzero(self.owner_fed.any(dim=1).cpu().numpy() & self._labelled())
        stop = self.owner_stop
        if stop is not None and stop.stopped:  # early stopped: the best weights stay
            return float(self.owner_once.done(call.round_id, key, 0.0))
        if stop is not None:
            rows = stop.split(rows)
        order = rng(self.config.seed, Stream.DVFL_OWNER_PLAN, call.epoch).permutation(rows)
        net.train()
        losses = []
        size = self.config.batch_rows(len(order))  # a method with stages: no table rule
        for start in range(0, len(order), size):
            batch = np.sort(order[start : start + size])
            x = self.owner_inputs[torch.as_tensor(batch, device=self.party.device)].flatten(1)
            opt.zero_grad(set_to_none=True)
            loss = self.party.loss_fn(net(x), self.party.targets(batch))  # (B, C) vs targets
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
        if stop is not None:
            last = call.epoch + 1 >= self.config.dvfl.owner_epochs
            stop.after_epoch(net, call.epoch, self._owner_accuracy(net, stop.validation), last)
        return float(self.owner_once.done(call.round_id, key, np.mean(losses) if losses else 0.0))

    def _owner_accuracy(self, net: torch.nn.Module, rows: np.ndarray | None) -> float:
        """The owner's accuracy on its validation rows (early stopping)."""
        if rows is None or not len(rows) or self.party.task == REGRESSION:
            return 0.0
        assert self.owner_inputs is not None
        net.eval()
        with torch.no_grad():
            x = self.owner_inputs[torch.as_tensor(rows, device=self.party.device)].flatten(1)
            hits = net(x).argmax(dim=1) == self.party.targets(rows)
        return float(hits.float().mean())

    def owner_predict(self, outputs: Mapping[int, np.ndarray]) -> np.ndarray:
        """Probabilities (B, C), or regression values (B, 1) in original units."""
        sizes = {a.shape[0] for a in outputs.values()}
        if len(sizes) != 1:
            raise ProtocolError(f"owner predict: host outputs disagree in batch size {sizes}")
        net, _ = self._owner()
        size, dim = sizes.pop(), self.config.dvfl.host_dim
        x = concat_slots(
            self._parts(outputs, size, dim, "host output"), self.slots, size, dim, self.party.device
        )
        net.eval()
        with torch.no_grad():
            out = net(x)
            if self.party.task == REGRESSION:
                return self.party.to_wire(self.party.scaler.restore(out))
            return self.party.to_wire(torch.softmax(out, dim=1))

    def _owner(self) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        p = self.party
        if not p.data.meta.has_labels:
            raise ProtocolError(f"party {p.party_id} holds no labels: it cannot be the owner")
        if self.owner is None:
            cfg = self.config.dvfl
            width = self.slots * cfg.host_dim
            classes = output_width(p.task, p.data.meta.num_classes)
            seed = derive_seed(self.config.seed, Stream.DVFL_INIT_OWNER, p.block)
            self.owner = build_classifier(width, cfg.owner_hidden, classes, seed).to(p.device)
            self.owner_opt = EagerSGD(
                self.owner.parameters(), lr=cfg.owner_lr, momentum=cfg.owner_momentum
            )
            rows = len(p.split("train"))
            self.owner_inputs = torch.zeros(rows, self.slots, cfg.host_dim, device=p.device)
            self.owner_fed = torch.zeros(rows, self.slots, dtype=torch.bool, device=p.device)
        assert self.owner_opt is not None
        return self.owner, self.owner_opt

    def _labelled(self) -> np.ndarray:
        """(rows,) bool: train rows with a label (a negative class marks an unlabelled row)."""
        labels = self.party.split("train").labels
        assert labels is not None
        if self.party.task == REGRESSION:
            return np.isfinite(labels)
        return labels >= 0

    # ------------------------------------------------------------------ state
    def last_round(self) -> int:
        return max(self.guest_once.last, self.host_once.last, self.owner_once.last)

    def modules(self) -> list[torch.nn.Module]:
        """Every network, in a fixed order (guest, host, owner if built)."""
        return [self.guest, self.host, *([self.owner] if self.owner is not None else [])]

    def state_dict(self) -> dict[str, object]:
        state: dict[str, object] = {
            "guest": self.guest.state_dict(),
            "guest_opt": self.guest_opt.state_dict(),
            "host": self.host.state_dict(),
            "host_opt": self.host_opt.state_dict(),
            "rounds": [self.guest_once.last, self.host_once.last, self.owner_once.last],
        }
        if self.registers is not None:
            state["registers"] = {"samples": self.registers.samples, **self.registers.state_dict()}
        if self.owner is not None and self.owner_opt is not None:
            state["owner"] = self.owner.state_dict()
            state["owner_opt"] = self.owner_opt.state_dict()
            state["owner_inputs"] = self.owner_inputs
            state["owner_fed"] = self.owner_fed
        if self.owner_stop is not None:
            state["owner_stop"] = self.owner_stop.state_dict()
        return state

    def load_state_dict(self, state: dict, last_round: int) -> None:
        """Restore; rounds after `last_round` (the party's, possibly rolled back) are accepted."""
        self.guest.load_state_dict(state["guest"])
        self.guest_opt.load_state_dict(state["guest_opt"])
        self.host.load_state_dict(state["host"])
        self.host_opt.load_state_dict(state["host_opt"])
        self.registers = None
        if "registers" in state:
            saved = state["registers"]
            self._registers(int(saved["samples"])).load_state_dict(saved)
        self.owner = self.owner_opt = self.owner_inputs = self.owner_fed = None
        if "owner" in state:
            net, opt = self._owner()
            net.load_state_dict(state["owner"])
            opt.load_state_dict(state["owner_opt"])
            assert self.owner_inputs is not None and self.owner_fed is not None
            self.owner_inputs.copy_(state["owner_inputs"])
            self.owner_fed.copy_(state["owner_fed"])
        if self.owner_stop is not None and "owner_stop" in state:
            self.owner_stop.load_state_dict(state["owner_stop"])
        onces = (self.guest_once, self.host_once, self.owner_once)
        for once, saved_round in zip(onces, state["rounds"], strict=True):
            once.last, once.key, once.result = min(int(saved_round), last_round), b"", None
