"""The latent-variable VFL's parties: what each computes in a round, transport-free.

A round of stage 1 (the importance-weighted bound over every sample, labelled or not):

1. **Encode**: each party k holding the batch returns its Gaussian expert of h,
   [mean_k | logvar_k], (B, 2d).
2. **Sample**: the active party multiplies the experts (vfl_core.dlvm_math) and draws kappa
   samples of h, (B, kappa, d), which it sends to the parties.
3. **Decode**: each party returns log p(x_k | h_s), (B, kappa), and its gradient in h_s,
   (B, kappa, d); with MNAR every party, holding the sample or not, adds log p(m_k | h_s).
4. **Update**: the active party computes the bound, steps q(z | h) and p(h | z), and returns to
   each party dL/d(log-likelihood) (B, kappa) and dL/d(expert) (B, 2d); each party
   backpropagates them through its decoder and encoder and steps.

Stage 2 trains the active party's classifier p(y | h) on its labelled rows with the same
weights (no update for the parties); prediction is SNIS with L samples. Only experts, latent
samples, log-likelihoods and their gradients cross a party boundary: no feature, no label.
Values cross as float32 numpy arrays, as they would on the wire.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

import numpy as np
import torch

from vfl_core import dlvm_math as dm
from vfl_core.data import PartyData, PartySplit
from vfl_core.dlvm_models import ActiveModels, BlockModels, DlvmConfig
from vfl_core.errors import ProtocolError
from vfl_core.missingness import UNLABELLED
from vfl_core.seeding import Stream, derive_seed

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Decoded:
    """A party's answer to Decode: log-likelihood terms (B, S) and their gradient in h
    (B, S, d); the gradient is None outside training."""

    log_lik: np.ndarray
    grad: np.ndarray | None


@dataclass(frozen=True)
class PartyGrads:
    """What the active party returns to party k in Update."""

    log_lik: np.ndarray | None  # dL/d(log-likelihood terms), (B, S); None in stage 2
    expert: np.ndarray | None  # dL/d[mean | logvar], (B, 2d); None if k did not hold the batch


def to_wire(t: torch.Tensor) -> np.ndarray:
    return t.detach().to("cpu", torch.float32).numpy().copy()


def from_wire(array: np.ndarray, shape: tuple[int, ...], what: str) -> torch.Tensor:
    """A received array as a fresh tensor, checked for dtype, shape and finiteness."""
    if array.dtype != np.float32 or array.shape != shape:
        raise ProtocolError(f"{what}: got {array.dtype} {array.shape}, expected float32 {shape}")
    if not np.isfinite(array).all():
        raise ProtocolError(f"{what}: contains NaN or Inf")
    return torch.from_numpy(array.copy())  # own, aligned memory: the same bits in any transport


# ---------------------------------------------------------------- a data party


@dataclass
class _Pending:
    """A party's graph between Encode/Decode and Update of one training round."""

    round_id: int
    expert: torch.Tensor | None  # (B, 2d), attached to the encoder
    log_lik: torch.Tensor | None = None  # (B, S), attached to the decoder


class DlvmParty:
    """Party k: its rows, encoder and decoder (and missingness model); the active party also
    holds an `ActiveSide`."""

    def __init__(self, data: PartyData, config: DlvmConfig, seed: int, active: bool) -> None:
        meta = data.meta
        self.data, self.config, self.block = data, config, meta.block
        likelihood = "bernoulli" if meta.kind == "image" else "gaussian"
        self.models = BlockModels(config, meta.block, meta.feature_shape, likelihood, seed)
        self.opt = torch.optim.Adam(self.models.parameters(), lr=config.lr)
        self.active = ActiveSide(data, config, seed) if active else None
        self._pending: _Pending | None = None

    def replace_split(self, name: str, split: PartySplit | None) -> None:
        """Swap in another evaluation split (the same samples under other missingness)."""
        splits = {k: v for k, v in self.data.splits.items() if k != name}
        if split is not None:
            splits[name] = split
        self.data = replace(self.data, splits=splits)
        if self.active is not None:
            self.active.data = self.data

    def features(self, split: str, rows: np.ndarray) -> torch.Tensor:
        x = self.data.splits[split].features
        if rows.ndim != 1 or len(rows) == 0 or rows.min() < 0 or rows.max() >= len(x):
            raise ProtocolError(f"block {self.block}: rows out of range for split {split!r}")
        return torch.from_numpy(x[rows]).flatten(1)  # (B, F)

    def encode(self, round_id: int, split: str, rows: np.ndarray, train: bool) -> np.ndarray:
        """[mean | logvar] of this block's expert for the rows: (B, 2d)."""
        self.models.train(train)
        with torch.set_grad_enabled(train):
            mean, logvar = self.models.encoder(self.features(split, rows))  # (B, d) each
            expert = torch.cat([mean, logvar], dim=1)  # (B, 2d)
        if train:
            self._pending = _Pending(round_id, expert)
        return to_wire(expert)

    def decode(
        self, round_id: int, split: str, rows: np.ndarray | None, h: np.ndarray, train: bool
    ) -> Decoded:
        """Log-likelihood terms of this party at the latent samples h (B, S, d): its decoder's
        log p(x_k | h) if it holds the batch (``rows``), plus log p(m_k | h) with MNAR."""
        if rows is None and not self.config.mnar:
            raise ProtocolError(f"block {self.block}: decode for a batch it does not hold")
        if h.ndim != 3 or (rows is not None and len(rows) != len(h)):
            raise ProtocolError(f"block {self.block}: latent samples of shape {h.shape}")
        leaf = from_wire(h, (h.shape[0], h.shape[1], self.config.latent_dim), "h")
        leaf.requires_grad_(train)
        with torch.set_grad_enabled(train):
            terms = torch.zeros(leaf.shape[:2])
            if rows is not None:
                terms = self.models.decoder.log_prob(self.features(split, rows), leaf)  # (B, S)
            if self.config.mnar:
                terms = terms + self.models.missing_log_prob(rows is not None, leaf)
        if not train:
            return Decoded(to_wire(terms), None)
        (grad,) = torch.autograd.grad(terms.sum(), leaf, retain_graph=True)  # (B, S, d)
        pending = self._pending if rows is not None else _Pending(round_id, None)
        if pending is None or pending.round_id != round_id:
            raise ProtocolError(f"block {self.block}: decode for round {round_id} before encode")
        pending.log_lik = terms
        self._pending = pending
        return Decoded(to_wire(terms), to_wire(grad))

    def update(self, round_id: int, grads: PartyGrads) -> None:
        """Backpropagate the active party's gradients through this party's networks; step."""
        pending = self._pending
        if pending is None or pending.round_id != round_id:
            raise ProtocolError(f"block {self.block}: update for round {round_id} without encode")
        outputs: list[torch.Tensor] = []
        seeds: list[torch.Tensor] = []
        if grads.log_lik is not None:  # stage 1: the decoder's terms (stage 2 fine-tunes only
            if pending.log_lik is None:  # the encoder)
                raise ProtocolError(
                    f"block {self.block}: update for round {round_id} without decode"
                )
            outputs.append(pending.log_lik)
            seeds.append(from_wire(grads.log_lik, tuple(pending.log_lik.shape), "grad of log-lik"))
        if pending.expert is not None:
            if grads.expert is None:
                raise ProtocolError(f"block {self.block}: update lacks its expert's gradient")
            outputs.append(pending.expert)
            seeds.append(from_wire(grads.expert, tuple(pending.expert.shape), "grad of expert"))
        self.opt.zero_grad(set_to_none=True)
        torch.autograd.backward(outputs, seeds)
        self.opt.step()
        self._pending = None

    def parameters_vector(self) -> np.ndarray:
        params = [p.detach().flatten() for p in self.models.parameters()]
        if self.active is not None:
            params += [p.detach().flatten() for p in self.active.models.parameters()]
        return torch.cat(params).numpy()


# ---------------------------------------------------------------- the active party


@dataclass
class _Draw:
    """The active party's state between Sample and Update."""

    draw: tuple[int, ...]
    experts: dict[int, torch.Tensor]  # block -> (B, 2d) leaves
    h: torch.Tensor  # (B, S, d)
    own: torch.Tensor  # (B, S): log p(z) + log p(h | z) - log q(z | h) - log q(h | x_O)


class ActiveSide:
    """The active party's q(z | h), p(h | z), classifier and the labels of its rows."""

    def __init__(self, data: PartyData, config: DlvmConfig, seed: int) -> None:
        meta = data.meta
        if not meta.has_labels:
            raise ProtocolError(f"block {meta.block} holds no labels: it cannot be active")
        self.data, self.config, self.seed = data, config, seed
        self.models = ActiveModels(config, meta.block, meta.num_classes, seed)
        generative = [*self.models.q_z.parameters(), *self.models.p_h.parameters()]
        self.opt = torch.optim.Adam(generative, lr=config.lr)
        self.classifier_opt = torch.optim.Adam(self.models.classifier.parameters(), lr=config.lr)
        self._draw: _Draw | None = None

    def labelled_rows(self) -> np.ndarray:
        """Which training rows have a label (the coordinator plans stage 2 over them)."""
        labels = self.data.splits["train"].labels
        assert labels is not None
        return np.flatnonzero(labels != UNLABELLED)

    def sample(
        self, draw: tuple[int, ...], experts: dict[int, np.ndarray], samples: int, train: bool
    ) -> np.ndarray:
        """The posterior's latent samples h (B, S, d) from the observed blocks' experts.

        ``draw`` names the noise stream (e.g. (stage, round)); training keeps the graph to
        the experts for Update."""
        if not experts:
            raise ProtocolError("sample needs at least one observed block's expert")
        d = self.config.latent_dim
        batch = len(next(iter(experts.values())))
        leaves = {
            b: from_wire(e, (batch, 2 * d), f"expert of block {b}").requires_grad_(train)
            for b, e in sorted(experts.items())
        }
        noise_h, noise_z = self._noise(draw, batch, samples)
        self.models.train(train)
        with torch.set_grad_enabled(train):
            mean, logvar = dm.product_of_experts(
                [e[:, :d] for e in leaves.values()], [e[:, d:] for e in leaves.values()]
            )  # (B, d) each
            h = dm.reparameterise(mean, logvar, noise_h)  # (B, S, d)
            log_q = dm.gaussian_log_prob(h, mean.unsqueeze(1), logvar.unsqueeze(1))  # (B, S)
            own = self.models.prior_terms(h, noise_z) - log_q
        self._draw = _Draw(draw, leaves, h, own)
        return to_wire(h)

    def _noise(self, draw: tuple[int, ...], batch: int, samples: int):
        gen = torch.Generator().manual_seed(derive_seed(self.seed, Stream.DLVM_NOISE, *draw))
        shape = (batch, samples)
        noise_h = torch.randn((*shape, self.config.latent_dim), generator=gen)
        noise_z = torch.randn((*shape, self.config.z_dim), generator=gen)
        return noise_h, noise_z

    def _log_weights(
        self, answers: dict[int, Decoded], train: bool
    ) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        """log w (B, S) of the current draw, and the parties' log-likelihood leaves."""
        state = self._current()
        shape = tuple(state.h.shape[:2])
        d = self.config.latent_dim
        log_w = state.own
        leaves: dict[int, torch.Tensor] = {}
        for b, answer in sorted(answers.items()):
            value = from_wire(answer.log_lik, shape, f"log-likelihood of block {b}")
            if train:
                if answer.grad is None:
                    raise ProtocolError(f"block {b}: a training answer needs its gradient")
                grad = from_wire(answer.grad, (*shape, d), f"gradient of block {b}")
                leaves[b] = value.requires_grad_(True)
                log_w = log_w + dm.linearised(leaves[b], grad, state.h)
            else:
                log_w = log_w + value
        return log_w, leaves

    def bound_step(self, answers: dict[int, Decoded]) -> tuple[float, dict[int, PartyGrads]]:
        """Stage 1: maximise the IWAE bound; step q(z | h), p(h | z); the parties' gradients."""
        state = self._current()
        log_w, leaves = self._log_weights(answers, train=True)
        loss = -dm.iwae_bound(log_w).mean()
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        grads = {}
        for b, leaf in leaves.items():
            expert = state.experts.get(b)
            grads[b] = PartyGrads(
                to_wire(_grad(leaf)), None if expert is None else to_wire(_grad(expert))
            )
        self._draw = None
        return float(loss.detach()), grads

    def classifier_step(
        self, answers: dict[int, Decoded], rows: np.ndarray
    ) -> tuple[float, dict[int, PartyGrads]]:
        """Stage 2: maximise log sum_s w~_s p(y | h_s) over the labelled rows of the batch
        (weights held fixed); step the classifier and return the experts' gradients, with
        which the parties fine-tune their encoders."""
        labels = self.data.splits["train"].labels
        assert labels is not None
        y = torch.from_numpy(labels[rows])
        if (y == UNLABELLED).any():
            raise ProtocolError("stage 2 batch holds an unlabelled row")
        state = self._current()
        with torch.no_grad():
            log_w, _ = self._log_weights(answers, train=False)
        self.models.classifier.train()
        log_py = self.models.class_log_probs(state.h)  # (B, S, C)
        picked = log_py.gather(2, y.view(-1, 1, 1).expand(-1, state.h.shape[1], 1)).squeeze(2)
        loss = -torch.logsumexp(torch.log_softmax(log_w, dim=1) + picked, dim=1).mean()
        self.classifier_opt.zero_grad(set_to_none=True)
        loss.backward()
        self.classifier_opt.step()
        grads = {b: PartyGrads(None, to_wire(_grad(e))) for b, e in state.experts.items()}
        self._draw = None
        return float(loss.detach()), grads

    def predict(self, answers: dict[int, Decoded]) -> np.ndarray:
        """SNIS: sum_l w~_l p(y | h_l), (B, C)."""
        with torch.no_grad():
            log_w, _ = self._log_weights(answers, train=False)
            self.models.eval()
            probs = torch.exp(self.models.class_log_probs(self._current().h))  # (B, L, C)
            out = dm.snis(log_w, probs)
        self._draw = None
        return to_wire(out)

    def _current(self) -> _Draw:
        if self._draw is None:
            raise ProtocolError("the active party has no latent samples drawn")
        return self._draw


def _grad(leaf: torch.Tensor) -> torch.Tensor:
    return leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)
