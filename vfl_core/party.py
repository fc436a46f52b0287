"""One party of the federation: its data block, f_k, g_k (if it holds labels), optimisers and RNG.

A Party answers the calls of `vfl_core.protocol` and knows nothing of how they arrive. Every call
is checked against the party's own state (round, rows, digest, shapes) and refused with a
ProtocolError rather than corrupting the model. Calls of a training round are idempotent: a
retried Embed or Fuse returns the cached answer and a retried Backward does nothing.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from vfl_core.alignment import batch_digest, hash_ids
from vfl_core.config import TrainConfig
from vfl_core.data import PartyData, PartySplit
from vfl_core.errors import ProtocolError, StaleRoundError
from vfl_core.laser import sample_tasks, sampled_loss
from vfl_core.models import build_head, build_representation
from vfl_core.protocol import (
    BackwardCall,
    EmbedCall,
    FuseCall,
    FuseResult,
    PartyInfo,
    PredictCall,
    ScoreCall,
)
from vfl_core.seeding import Stream, derive_seed, rng

log = logging.getLogger(__name__)


@dataclass
class _Round:
    """What a party remembers of the training round in progress."""

    round_id: int
    rows: np.ndarray
    digest: bytes
    embedding: torch.Tensor  # (B, d), attached to f_k's graph
    wire: np.ndarray  # (B, d), what was sent
    fuse_result: FuseResult | None = None
    own_grad: torch.Tensor | None = None  # dL_k/dE_k from the party's own head
    stepped: bool = False
    others: tuple[int, ...] = field(default_factory=tuple)


class Party:
    def __init__(
        self,
        party_id: str,
        data: PartyData,
        config: TrainConfig,
        *,
        secret: bytes,
        device: torch.device | str = "cpu",
    ) -> None:
        self.party_id = party_id
        self.data = data
        self.config = config
        self.device = torch.device(device)
        self.block = data.meta.block
        self._secret = secret
        self._hashes: dict[str, list[bytes]] = {}
        self._features: dict[str, torch.Tensor] = {}
        self._round: _Round | None = None
        self.last_round = -1
        seed, block = config.seed, self.block
        shape = tuple(data.meta.feature_shape)
        self.f = build_representation(
            config.model, shape, derive_seed(seed, Stream.INIT_REPRESENTATION, block)
        ).to(self.device)
        self.f_opt = _optimizer(self.f, config)
        self.g: nn.Module | None = None
        self.g_opt: torch.optim.Optimizer | None = None
        if data.meta.has_labels:
            self.g = build_head(
                config.model, data.meta.num_classes, derive_seed(seed, Stream.INIT_HEAD, block)
            ).to(self.device)
            self.g_opt = _optimizer(self.g, config)

    # ----------------------------------------------------------------- identity and alignment
    @property
    def info(self) -> PartyInfo:
        return party_info(self.party_id, self.data)

    def id_hashes(self, split: str) -> list[bytes]:
        if split not in self._hashes:
            self._hashes[split] = hash_ids(self._split(split).ids.tolist(), self._secret)
        return self._hashes[split]

    def class_weights(self, split: str) -> np.ndarray | None:
        """Per-row inverse class frequency, for class-balanced resampling (reveals classes to
        the coordinator, which is why balancing is opt-in)."""
        labels = self._split(split).labels
        if labels is None:
            return None
        counts = np.bincount(labels, minlength=self.data.meta.num_classes).astype(np.float64)
        return (1.0 / np.maximum(counts, 1.0))[labels]

    # ----------------------------------------------------------------- training round
    def embed(self, call: EmbedCall) -> np.ndarray:
        if not call.train:
            x = self._batch(call.split, call.rows, call.digest)
            self.f.eval()
            with torch.no_grad():
                return self._to_wire(self.f(x))
        current = self._round
        if current is not None and call.round_id == current.round_id:
            if not np.array_equal(current.rows, call.rows) or current.digest != call.digest:
                raise ProtocolError(f"round {call.round_id}: embed repeated with other rows")
            return current.wire
        if call.round_id <= self.last_round:
            raise StaleRoundError(
                f"round {call.round_id} is stale: party is at round {self.last_round}"
            )
        x = self._batch(call.split, call.rows, call.digest)
        self.f.train()
        embedding = self.f(x)  # (B, d)
        self._round = _Round(
            call.round_id, call.rows, call.digest, embedding, self._to_wire(embedding)
        )
        self.last_round = call.round_id
        return self._round.wire

    def fuse(self, call: FuseCall) -> FuseResult:
        state = self._current(call.round_id, "fuse")
        if self.g is None or self.g_opt is None:
            raise ProtocolError(f"party {self.party_id} holds no labels and has no fusion head")
        if state.fuse_result is not None:
            return state.fuse_result
        batch = len(state.rows)
        others = {
            b: self._from_wire(e, f"embedding of block {b}", batch).requires_grad_(True)
            for b, e in sorted(call.embeddings.items())
            if b != self.block
        }
        own = state.embedding.detach().requires_grad_(True)
        embeddings = {self.block: own, **others}
        tasks = sample_tasks(self.block, sorted(embeddings), self._task_rng(call.round_id))
        target = self._labels("train", state.rows)
        self.g.train()
        self._set_lr(self.g_opt, call.epoch)
        self.g_opt.zero_grad(set_to_none=True)
        loss = sampled_loss(self.g, embeddings, tasks, target, nn.functional.cross_entropy)
        loss.backward()
        self.g_opt.step()
        state.own_grad = _grad_or_zeros(own)
        state.fuse_result = FuseResult(
            loss=float(loss.detach()),
            # A block in no sampled task gets a zero gradient (it did not influence L_k).
            grads={b: self._to_wire(_grad_or_zeros(t)) for b, t in others.items()},
        )
        return state.fuse_result

    def backward(self, call: BackwardCall) -> None:
        state = self._current(call.round_id, "backward")
        if state.stepped:
            return
        grad = state.own_grad
        if call.grad is not None:
            received = self._from_wire(call.grad, "summed gradient", len(state.rows))
            grad = received if grad is None else received + grad
        state.stepped = True
        if grad is None:
            return
        self._set_lr(self.f_opt, call.epoch)
        self.f_opt.zero_grad(set_to_none=True)
        state.embedding.backward(grad)
        self.f_opt.step()

    # ----------------------------------------------------------------- inference and scoring
    def predict(self, call: PredictCall) -> np.ndarray:
        if self.g is None:
            raise ProtocolError(f"party {self.party_id} holds no labels and has no fusion head")
        if self.block not in call.embeddings:
            raise ProtocolError(
                f"predict for party {self.party_id} lacks its own block {self.block}"
            )
        sizes = {e.shape[0] for e in call.embeddings.values()}
        if len(sizes) != 1:
            raise ProtocolError(f"predict embeddings disagree in batch size: {sorted(sizes)}")
        batch = sizes.pop()
        embeddings = {
            b: self._from_wire(e, f"embedding of block {b}", batch)
            for b, e in sorted(call.embeddings.items())
        }
        self.g.eval()
        with torch.no_grad():
            fused = torch.stack([embeddings[b] for b in sorted(embeddings)]).mean(dim=0)  # (B, d)
            return self._to_wire(torch.softmax(self.g(fused), dim=1))

    def score(self, call: ScoreCall) -> dict[str, np.ndarray]:
        """Confusion matrices (true x predicted) of each named prediction on this batch."""
        self._check_digest(call.split, call.rows, call.digest)
        labels = self._split(call.split).labels
        if labels is None:
            raise ProtocolError(f"party {self.party_id} holds no labels to score with")
        classes = self.data.meta.num_classes
        truth = labels[call.rows]
        out: dict[str, np.ndarray] = {}
        for name, predicted in call.predictions.items():
            if predicted.shape != truth.shape or ((predicted < 0) | (predicted >= classes)).any():
                raise ProtocolError(f"prediction '{name}' has the wrong shape or classes")
            out[name] = np.bincount(
                truth * classes + predicted, minlength=classes * classes
            ).reshape(classes, classes)
        return out

    def replace_split(self, name: str, split: PartySplit | None) -> None:
        """Swap in another evaluation split (e.g. the same test samples with other missingness)."""
        splits = {k: v for k, v in self.data.splits.items() if k != name}
        if split is not None:
            splits[name] = split
        self.data = PartyData(self.data.meta, splits)
        self._hashes.pop(name, None)
        self._features.pop(name, None)

    # ----------------------------------------------------------------- state
    def state_dict(self) -> dict[str, object]:
        state: dict[str, object] = {
            "f": self.f.state_dict(),
            "f_opt": self.f_opt.state_dict(),
            "last_round": self.last_round,
        }
        if self.g is not None and self.g_opt is not None:
            state["g"] = self.g.state_dict()
            state["g_opt"] = self.g_opt.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.f.load_state_dict(state["f"])
        self.f_opt.load_state_dict(state["f_opt"])
        if self.g is not None and self.g_opt is not None:
            self.g.load_state_dict(state["g"])
            self.g_opt.load_state_dict(state["g_opt"])
        self.last_round = int(state["last_round"])
        self._round = None

    def parameters_vector(self) -> np.ndarray:
        """All weights flattened (for equivalence tests and fingerprints)."""
        modules = [self.f] + ([self.g] if self.g is not None else [])
        return torch.cat(
            [p.detach().cpu().reshape(-1) for m in modules for p in m.parameters()]
        ).numpy()

    # ----------------------------------------------------------------- helpers
    def _split(self, split: str) -> PartySplit:
        try:
            return self.data.splits[split]
        except KeyError:
            raise ProtocolError(f"party {self.party_id} has no '{split}' split") from None

    def _check_digest(self, split: str, rows: np.ndarray, digest: bytes) -> None:
        n = len(self._split(split))
        if rows.ndim != 1 or rows.size == 0 or rows.min() < 0 or rows.max() >= n:
            raise ProtocolError(f"rows out of range for split '{split}' with {n} samples")
        hashes = self.id_hashes(split)
        if batch_digest(hashes[int(r)] for r in rows) != digest:
            raise ProtocolError(f"batch digest mismatch on split '{split}': plans disagree")

    def _batch(self, split: str, rows: np.ndarray, digest: bytes) -> torch.Tensor:
        self._check_digest(split, rows, digest)
        if split not in self._features:
            self._features[split] = torch.from_numpy(self._split(split).features).to(self.device)
        return self._features[split][torch.from_numpy(rows).to(self.device)]  # (B, *shape)

    def _labels(self, split: str, rows: np.ndarray) -> torch.Tensor:
        labels = self._split(split).labels
        assert labels is not None
        return torch.from_numpy(labels[rows]).to(self.device)

    def _current(self, round_id: int, phase: str) -> _Round:
        state = self._round
        if state is None or state.round_id != round_id:
            have = "none" if state is None else state.round_id
            raise StaleRoundError(
                f"{phase} for round {round_id}, but the party embedded round {have}"
            )
        return state

    def _from_wire(self, array: np.ndarray, what: str, batch: int) -> torch.Tensor:
        d = self.config.model.embed_dim
        if array.dtype != np.float32 or array.shape != (batch, d):
            raise ProtocolError(
                f"{what}: got {array.dtype} {tuple(array.shape)}, expected float32 ({batch}, {d})"
            )
        if not np.isfinite(array).all():
            raise ProtocolError(f"{what}: contains NaN or Inf")
        return torch.from_numpy(array).to(self.device)

    @staticmethod
    def _to_wire(t: torch.Tensor) -> np.ndarray:
        return t.detach().to("cpu", torch.float32).numpy().copy()

    def _task_rng(self, round_id: int) -> np.random.Generator:
        return rng(self.config.seed, Stream.TASKS, round_id, self.block)

    def _set_lr(self, opt: torch.optim.Optimizer, epoch: int) -> None:
        cfg = self.config
        factor = 1.0
        if cfg.scheduler == "cosine" and cfg.epochs > 0:
            factor = 0.5 * (1.0 + math.cos(math.pi * min(epoch, cfg.epochs) / cfg.epochs))
        for group in opt.param_groups:
            group["lr"] = cfg.lr * factor


def party_info(party_id: str, data: PartyData) -> PartyInfo:
    """What a party with this data says about itself (before it has a training config)."""
    meta = data.meta
    return PartyInfo(
        party_id=party_id,
        block=meta.block,
        num_blocks=meta.num_blocks,
        dataset=meta.dataset,
        feature_shape=tuple(meta.feature_shape),
        num_classes=meta.num_classes,
        has_labels=meta.has_labels,
        samples={name: len(split) for name, split in data.splits.items()},
    )


def _optimizer(module: nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    if config.optimizer == "sgd":
        return torch.optim.SGD(
            module.parameters(),
            lr=config.lr,
            momentum=config.momentum,
            weight_decay=config.weight_decay,
        )
    return torch.optim.Adam(module.parameters(), lr=config.lr, weight_decay=config.weight_decay)


def _grad_or_zeros(leaf: torch.Tensor) -> torch.Tensor:
    return leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)
