"""The latent-variable VFL inside one party process (vfl_core.methods.dlvm.latent_math has the
model's math).

Every party k holds an encoder, its Gaussian expert q_k(h | x_k), and a decoder p(x_k | h)
(with MNAR also p(m_k | h), whether it holds a sample). A label party also holds q(z | h),
p(h | z) and the classifier p(y | h); the lowest label block is the active party, the one the
coordinator asks to step. What a party computes in a round (vfl_core.methods.dlvm.messages):

- Embed: [mean | logvar] of its expert for its rows, (B, 2d), keeping the graph in training;
- Decode: log p(x_k | h) at the coordinator's latent samples h, (B, S), and its gradient in h;
- Step (the active party): the bound or the classifier's loss from the experts and the decoders'
  answers; it steps its own networks and returns every party's gradients;
- Backward: backpropagate those gradients through its decoder and encoder, and step.

Every call of the current round answers a retry with the same answer; other content for the
same round is refused, and an earlier round is stale (as for a Party's Embed/Fuse/Backward).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from vfl_core.data.missingness import UNLABELLED
from vfl_core.errors import ConfigError, ProtocolError, StaleRoundError
from vfl_core.methods.dlvm import latent_math as dm
from vfl_core.methods.dlvm.messages import (
    DecodeCall,
    Decoded,
    DlvmBackwardCall,
    PartyGrads,
    Stage,
    StepCall,
    StepResult,
)
from vfl_core.methods.dlvm.models import ActiveModels, BlockModels
from vfl_core.model.model_bank import make_optimizer
from vfl_core.protocol import EmbedCall
from vfl_core.seeding import Stream, derive_seed, rng

if TYPE_CHECKING:
    from vfl_core.config import TrainConfig
    from vfl_core.methods.party_port import PartyPort

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- the posterior's samples


def noise(seed: int, stage: int, round_id: int, shape: tuple[int, int], dims: tuple[int, int]):
    """The standard normal draws of h and z for one step: (B, S, d) and (B, S, dz). The same
    (seed, stage, round) gives the same draws in the coordinator and the active party.
    Inference draws the same noise at every request (`round_id` there is the request counter):
    a sample's predicted class is then the same each time it is asked for in the same batch
    position (an evaluation's batches are a fixed plan), not a new Monte Carlo estimate."""
    key = 0 if stage == Stage.PREDICT else round_id
    gen = torch.Generator().manual_seed(derive_seed(seed, Stream.DLVM_NOISE, stage, key))
    noise_h = torch.randn((*shape, dims[0]), generator=gen)
    noise_z = torch.randn((*shape, dims[1]), generator=gen)
    return noise_h, noise_z


def kept_experts(
    blocks: list[int], seed: int, stage: int, round_id: int, dropout: float
) -> list[int]:
    """The experts a step's posterior multiplies (DlvmConfig.expert_dropout): every one at
    inference or without dropout; else each stays with 1 - dropout, and at least the one whose
    draw was highest (the same draw in the coordinator and the active party)."""
    if dropout == 0.0 or stage == Stage.PREDICT or len(blocks) < 2:
        return blocks
    draws = rng(seed, Stream.DLVM_DROPOUT, stage, round_id).random(len(blocks))  # block order
    kept = [b for b, u in zip(blocks, draws, strict=True) if u >= dropout]
    return kept or [blocks[int(np.argmax(draws))]]


def posterior(experts: Mapping[int, torch.Tensor], noise_h: torch.Tensor, kept: list[int]):
    """The product of the `kept` experts (B, 2d) each, in block order, and samples from it:
    (mean, logvar) (B, d) each, h (B, S, d)."""
    d = noise_h.shape[-1]
    parts = [experts[b] for b in kept]
    mean, logvar = dm.product_of_experts([e[:, :d] for e in parts], [e[:, d:] for e in parts])
    return mean, logvar, dm.reparameterise(mean, logvar, noise_h)


def latent_samples(
    experts: Mapping[int, np.ndarray],
    config: TrainConfig,
    stage: int,
    round_id: int,
    samples: int,
) -> np.ndarray:
    """What the coordinator sends the decoders: S samples of h from the product of the
    received experts, (B, S, d) float32 (the active party redraws exactly these)."""
    tensors = {b: from_wire(e, e.shape, f"expert of block {b}") for b, e in experts.items()}
    cfg, seed = config.dlvm, config.seed
    batch = next(iter(tensors.values())).shape[0]
    noise_h, _ = noise(seed, stage, round_id, (batch, samples), (cfg.latent_dim, cfg.z_dim))
    kept = kept_experts(sorted(tensors), seed, stage, round_id, cfg.expert_dropout)
    with torch.no_grad():
        return to_wire(posterior(tensors, noise_h, kept)[2])


# ---------------------------------------------------------------- wire helpers


def to_wire(t: torch.Tensor) -> np.ndarray:
    return t.detach().to("cpu", torch.float32).numpy().copy()


def from_wire(array: np.ndarray, shape: tuple[int, ...], what: str) -> torch.Tensor:
    """A received array as a fresh tensor, checked for dtype, shape and finiteness. The copy
    lives in torch's own aligned memory: the same bits in any transport."""
    if array.dtype != np.float32 or array.shape != tuple(shape):
        raise ProtocolError(f"{what}: got {array.dtype} {array.shape}, expected float32 {shape}")
    if not np.isfinite(array).all():
        raise ProtocolError(f"{what}: contains NaN or Inf")
    return torch.from_numpy(array.copy())


def _content_key(*parts: object) -> bytes:
    """A digest of a call's content, to tell an identical retry from another call."""
    h = hashlib.sha256()
    for part in parts:
        if isinstance(part, np.ndarray):
            h.update(repr((part.dtype.str, part.shape)).encode())
            h.update(np.ascontiguousarray(part).tobytes())
        elif isinstance(part, Mapping):
            for k in sorted(part):
                h.update(repr(k).encode())
                h.update(_content_key(part[k]))
        elif isinstance(part, Decoded):
            h.update(_content_key(part.log_lik, part.grad))
        else:
            h.update(repr(part).encode())
    return h.digest()


def _grad(leaf: torch.Tensor) -> torch.Tensor:
    return leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)


# ---------------------------------------------------------------- a party's round


@dataclass
class _Round:
    """What a party keeps of the training round in progress, between Embed and Backward."""

    round_id: int
    rows: np.ndarray | None  # None: it does not hold the batch (decodes its MNAR term only)
    digest: bytes
    expert: torch.Tensor | None = None  # (B, 2d), attached to the encoder
    expert_wire: np.ndarray | None = None
    log_lik: torch.Tensor | None = None  # (B, S), attached to the decoder
    decoded: Decoded | None = None
    decode_key: bytes = b""
    stepped: bool = False


class DlvmRoles:
    """A party's latent-variable VFL networks and round state (what Party keeps instead of
    f_k and g_k for method dlvm)."""

    def __init__(self, party: PartyPort) -> None:
        meta = party.data.meta
        if meta.task != "classification":
            raise ConfigError("the latent-variable VFL (dlvm) is for classification tasks")
        if meta.categorical:
            raise ConfigError(
                f"party {party.party_id}: dlvm models every feature as a number; integer-coded "
                "categorical columns are not supported (one-hot them: vfl prepare --max-onehot)"
            )
        self.party = party
        self.config: TrainConfig = party.config
        cfg = self.config.dlvm
        likelihood = "bernoulli" if meta.kind == "image" else "gaussian"
        seed = self.config.seed
        self.models = BlockModels(cfg, meta.block, meta.feature_shape, likelihood, seed)
        self.models.to(party.device)
        self.opt = make_optimizer(self.models, self.config)
        self.active = (
            ActiveModels(cfg, meta.block, meta.num_classes, seed) if meta.has_labels else None
        )
        self.active_opt = (
            None if self.active is None else make_optimizer(self.active.generative, self.config)
        )
        self.classifier_opt = (
            None if self.active is None else make_optimizer(self.active.classifier, self.config)
        )
        self._round: _Round | None = None
        self._step: tuple[int, bytes, StepResult] | None = None  # the last training step

    @property
    def d(self) -> int:
        return self.config.dlvm.latent_dim

    # ------------------------------------------------------------------ Embed
    def embed(self, call: EmbedCall) -> np.ndarray:
        """The party's Gaussian expert of h, (B, 2d) (the round's Embed)."""
        return self.encode(call)

    def encode(self, call: EmbedCall) -> np.ndarray:
        """[mean | logvar] of this party's expert for its rows of the batch, (B, 2d)."""
        if not call.train:
            x = self.party.batch(call.split, call.rows, call.digest)
            self.models.eval()
            with torch.no_grad():
                return to_wire(torch.cat(self.models.encoder(x.flatten(1)), dim=1))
        current = self._round
        if current is not None and current.round_id == call.round_id:
            same = current.rows is not None and np.array_equal(current.rows, call.rows)
            if not same or current.digest != call.digest or current.expert_wire is None:
                raise ProtocolError(f"round {call.round_id}: embed repeated with other rows")
            return current.expert_wire
        self._check_new(call.round_id, "embed")
        x = self.party.batch(call.split, call.rows, call.digest)
        self.models.train()
        expert = torch.cat(self.models.encoder(x.flatten(1)), dim=1)  # (B, 2d)
        wire = to_wire(expert)
        self._round = _Round(call.round_id, call.rows, call.digest, expert, wire)
        self.party.last_round = call.round_id
        return wire

    # ------------------------------------------------------------------ Decode
    def decode(self, call: DecodeCall) -> Decoded:
        """log p(x_k | h) (+ log p(m_k | h) with MNAR) at the latent samples, (B, S), and in
        training its gradient in h, (B, S, d)."""
        mnar = self.config.dlvm.mnar
        if call.rows is None and not mnar:
            raise ProtocolError(f"block {self.party.block}: decode for a batch it does not hold")
        if call.h.ndim != 3 or call.h.shape[2] != self.d or call.h.shape[1] < 1:
            raise ProtocolError(
                f"latent samples of shape {call.h.shape}, expected (B, S, {self.d})"
            )
        if call.rows is not None and len(call.rows) != call.h.shape[0]:
            raise ProtocolError(f"latent samples for {call.h.shape[0]} rows, not {len(call.rows)}")
        leaf = from_wire(call.h, call.h.shape, "latent samples").to(self.party.device)
        if not call.train:
            with torch.no_grad():
                return Decoded(to_wire(self._terms(call, leaf, train=False)))
        state = self._decode_round(call)  # every check above: a refused call changes nothing
        key = _content_key(call.h)
        if state.decoded is not None:
            if key != state.decode_key:
                raise ProtocolError(f"round {call.round_id}: decode repeated with other samples")
            return state.decoded
        leaf.requires_grad_(True)
        terms = self._terms(call, leaf, train=True)
        (grad,) = torch.autograd.grad(terms.sum(), leaf, retain_graph=True)  # (B, S, d)
        state.log_lik, state.decode_key = terms, key
        state.decoded = Decoded(to_wire(terms), to_wire(grad))
        return state.decoded

    def _decode_round(self, call: DecodeCall) -> _Round:
        current = self._round
        if call.rows is None:  # MNAR: the party learns its missingness model on this batch
            if current is not None and current.round_id == call.round_id:
                if current.rows is not None:
                    raise ProtocolError(f"round {call.round_id}: decode without rows after embed")
                return current
            self._check_new(call.round_id, "decode")
            self._round = _Round(call.round_id, None, b"")
            self.party.last_round = call.round_id
            return self._round
        if current is None or current.round_id != call.round_id:
            raise StaleRoundError(f"decode for round {call.round_id} before its embed")
        if not np.array_equal(current.rows, call.rows) or current.digest != call.digest:
            raise ProtocolError(f"round {call.round_id}: decode for other rows than embedded")
        return current

    def _terms(self, call: DecodeCall, leaf: torch.Tensor, train: bool) -> torch.Tensor:
        """The party's log-likelihood terms at the samples `leaf`, (B, S, d) -> (B, S)."""
        self.models.train(train)
        with torch.set_grad_enabled(train):
            terms = torch.zeros(leaf.shape[:2], device=leaf.device)  # (B, S)
            if call.rows is not None:
                x = self.party.batch(call.split, call.rows, call.digest).flatten(1)
                terms = self.models.decoder.log_prob(x, leaf)
            if self.config.dlvm.mnar:
                terms = terms + self.models.missing_log_prob(call.rows is not None, leaf)
        return terms

    # ------------------------------------------------------------------ Backward
    def backward(self, call: DlvmBackwardCall) -> None:
        """Backpropagate the active party's gradients through the decoder's terms (stage 1) and
        the expert (both stages); step."""
        state = self._round
        if state is None or state.round_id != call.round_id:
            raise StaleRoundError(f"backward for round {call.round_id}, not the party's round")
        if state.stepped:
            return
        outputs, seeds = [], []
        if call.grads.log_lik is not None:
            if state.log_lik is None:
                raise ProtocolError(
                    f"round {call.round_id}: log-likelihood gradient without decode"
                )
            outputs.append(state.log_lik)
            seeds.append(self._wire_grad(call.grads.log_lik, state.log_lik, "log-likelihood"))
        if call.grads.expert is not None:
            if state.expert is None:
                raise ProtocolError(f"round {call.round_id}: expert gradient without embed")
            outputs.append(state.expert)
            seeds.append(self._wire_grad(call.grads.expert, state.expert, "expert"))
        state.stepped = True
        if not outputs:
            return
        self.opt.zero_grad(set_to_none=True)
        torch.autograd.backward(outputs, seeds)
        self.opt.step()

    def _wire_grad(self, array: np.ndarray, like: torch.Tensor, what: str) -> torch.Tensor:
        return from_wire(array, tuple(like.shape), f"gradient of the {what}").to(like.device)

    def _check_new(self, round_id: int, phase: str) -> None:
        if round_id <= self.party.last_round:
            raise StaleRoundError(
                f"{phase} for round {round_id}: party is at round {self.party.last_round}"
            )

    # ------------------------------------------------------------------ the active party
    def labelled_rows(self) -> np.ndarray:
        """The training rows this party holds a label for (stage 2 plans over them)."""
        labels = self.party.split("train").labels
        if self.active is None or labels is None:
            raise ProtocolError(f"party {self.party.party_id} holds no labels")
        return np.flatnonzero(labels != UNLABELLED).astype(np.int64)

    def step(self, call: StepCall) -> StepResult:
        """Stage 1: maximise the importance-weighted bound; stage 2: the classifier's SNIS
        log-likelihood of the labels. Steps this party's q(z | h), p(h | z) (stage 1) or
        classifier (stage 2); returns every party's gradients."""
        active = self._active()
        if call.stage == Stage.PREDICT:
            raise ProtocolError("step: the predict stage is asked with DlvmPredict")
        key = _content_key(call.stage, call.samples, call.experts, call.answers, call.rows)
        if self._step is not None:
            last, last_key, result = self._step
            if call.round_id < last:
                raise StaleRoundError(f"step for round {call.round_id}: party is at round {last}")
            if call.round_id == last:
                if key != last_key:
                    raise ProtocolError(f"round {call.round_id}: step repeated with other content")
                return result
        draw = self._draw(call, train=True)
        if call.stage == Stage.BOUND:
            result = self._bound_step(active, call, draw)
        else:
            result = self._classifier_step(active, call, draw)
        self._step = (call.round_id, key, result)
        return result

    def predict(self, call: StepCall) -> np.ndarray:
        """SNIS class probabilities sum_l w~_l p(y | h_l), (B, C) (or, with predict "average",
        equal weights)."""
        active = self._active()
        if call.stage != Stage.PREDICT:
            raise ProtocolError(f"predict with stage {int(call.stage)}")
        with torch.no_grad():
            draw = self._draw(call, train=False)
            log_w = self._log_weights(draw, call.answers, train=False)[0]  # (B, L)
            if self.config.dlvm.predict == "average":
                log_w = torch.zeros_like(log_w)
            active.eval()
            probs = torch.exp(active.class_log_probs(draw.h))  # (B, L, C)
            # float32 rounding lifts a confident class's weighted sum up to ~2e-7 above 1, and
            # the label parties refuse scores outside [0, 1] (the batch would go unscored)
            return to_wire(dm.snis(log_w, probs).clamp(0.0, 1.0))

    def _active(self) -> ActiveModels:
        if self.active is None:
            raise ProtocolError(f"party {self.party.party_id} holds no labels: it is not active")
        return self.active

    def _draw(self, call: StepCall, train: bool) -> _Draw:
        """Redraw the coordinator's latent samples from the experts, with the graph to them."""
        if not call.experts:
            raise ProtocolError("step: no expert")
        batch = next(iter(call.experts.values())).shape[0]
        cfg = self.config.dlvm
        experts = {
            b: from_wire(e, (batch, 2 * self.d), f"expert of block {b}").requires_grad_(train)
            for b, e in sorted(call.experts.items())
        }
        if call.samples < 1:
            raise ProtocolError(f"step: {call.samples} samples")
        noise_h, noise_z = noise(
            self.config.seed,
            int(call.stage),
            call.round_id,
            (batch, call.samples),
            (self.d, cfg.z_dim),
        )
        kept = kept_experts(
            sorted(experts), self.config.seed, call.stage, call.round_id, cfg.expert_dropout
        )
        active = self._active()
        active.train(train)
        with torch.set_grad_enabled(train):
            mean, logvar, h = posterior(experts, noise_h, kept)  # (B, d), (B, d), (B, S, d)
            log_q = dm.gaussian_log_prob(h, mean.unsqueeze(1), logvar.unsqueeze(1))  # (B, S)
            own = active.prior_terms(h, noise_z) - log_q
        return _Draw(experts, h, own)

    def _log_weights(
        self, draw: _Draw, answers: Mapping[int, Decoded], train: bool
    ) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        """log w (B, S) and the decoders' log-likelihood leaves (training)."""
        shape = tuple(draw.h.shape[:2])
        log_w = draw.own
        leaves: dict[int, torch.Tensor] = {}
        for b, answer in sorted(answers.items()):
            value = from_wire(answer.log_lik, shape, f"log-likelihood of block {b}")
            if not train:
                log_w = log_w + value
                continue
            if answer.grad is None:
                raise ProtocolError(f"block {b}: a training answer needs its gradient")
            grad = from_wire(answer.grad, (*shape, self.d), f"gradient of block {b}")
            leaves[b] = value.requires_grad_(True)
            log_w = log_w + dm.linearised(leaves[b], grad, draw.h)
        return log_w, leaves

    def _bound_step(self, active: ActiveModels, call: StepCall, draw: _Draw) -> StepResult:
        self._known_blocks(call)
        log_w, leaves = self._log_weights(draw, call.answers, train=True)
        loss = -dm.iwae_bound(log_w).mean()
        assert self.active_opt is not None
        self.active_opt.zero_grad(set_to_none=True)
        loss.backward()
        self.active_opt.step()
        blocks = sorted({*draw.experts, *leaves})
        grads = {
            b: PartyGrads(
                None if b not in leaves else to_wire(_grad(leaves[b])),
                None if b not in draw.experts else to_wire(_grad(draw.experts[b])),
            )
            for b in blocks
        }
        return StepResult(float(loss.detach()), grads)

    def _classifier_step(self, active: ActiveModels, call: StepCall, draw: _Draw) -> StepResult:
        """maximise log sum_s w~_s p(y | h_s) over the batch (weights held fixed)."""
        if call.rows is None:
            raise ProtocolError("classifier step without the active party's rows")
        self._known_blocks(call)
        x_rows = call.rows
        self.party.check_digest("train", x_rows, call.digest)
        if len(x_rows) != draw.h.shape[0]:
            raise ProtocolError(
                f"classifier step: {len(x_rows)} rows for {draw.h.shape[0]} samples"
            )
        labels = self.party.split("train").labels
        assert labels is not None
        y = torch.from_numpy(labels[x_rows])
        if (y == UNLABELLED).any():
            raise ProtocolError("classifier step: the batch holds an unlabelled row")
        with torch.no_grad():
            log_w = self._log_weights(draw, call.answers, train=False)[0]
        log_py = active.class_log_probs(draw.h)  # (B, S, C)
        picked = log_py.gather(2, y.view(-1, 1, 1).expand(-1, draw.h.shape[1], 1)).squeeze(2)
        loss = -torch.logsumexp(torch.log_softmax(log_w, dim=1) + picked, dim=1).mean()
        assert self.classifier_opt is not None
        self.classifier_opt.zero_grad(set_to_none=True)
        loss.backward()
        self.classifier_opt.step()
        grads = {b: PartyGrads(None, to_wire(_grad(e))) for b, e in draw.experts.items()}
        return StepResult(float(loss.detach()), grads)

    def _known_blocks(self, call: StepCall) -> None:
        num_blocks = self.party.data.meta.num_blocks
        blocks = {*call.experts, *call.answers}
        if any(not 0 <= b < num_blocks for b in blocks):
            raise ProtocolError(f"step: blocks {sorted(blocks)} outside 0..{num_blocks - 1}")

    # ------------------------------------------------------------------ state
    def modules(self) -> list[torch.nn.Module]:
        return [self.models] if self.active is None else [self.models, self.active]

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"models": self.models.state_dict(), "opt": self.opt.state_dict()}
        if self.active is not None:
            assert self.active_opt is not None and self.classifier_opt is not None
            state |= {
                "active": self.active.state_dict(),
                "active_opt": self.active_opt.state_dict(),
                "classifier_opt": self.classifier_opt.state_dict(),
            }
        return state

    def load_state_dict(self, state: Mapping[str, Any], last_round: int = -1) -> None:
        self.models.load_state_dict(state["models"])
        self.opt.load_state_dict(state["opt"])
        if self.active is not None:
            assert self.active_opt is not None and self.classifier_opt is not None
            self.active.load_state_dict(state["active"])
            self.active_opt.load_state_dict(state["active_opt"])
            self.classifier_opt.load_state_dict(state["classifier_opt"])
        self._round, self._step = None, None


@dataclass
class _Draw:
    """The active party's latent samples of a step, with the graph to the experts."""

    experts: dict[int, torch.Tensor]  # block -> (B, 2d) leaves
    h: torch.Tensor  # (B, S, d)
    own: torch.Tensor  # (B, S): log p(z) + log p(h | z) - log q(z | h) - log q(h | x_O)
