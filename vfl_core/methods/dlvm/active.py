"""The active party's part of the latent-variable VFL: its step (the bound in stage 1, the
classifier in stage 2) and its prediction, from the experts and the decoders' answers that the
coordinator relays (vfl_core.methods.dlvm.messages describes a round).

Stage 1 ascends the importance-weighted bound in q(z | h), p(h | z) here and returns every
party's gradients. Stage 2 is the paper's by default (DlvmConfig.stage2 "frozen"): Theta_g stays
fixed, only the classifier p(y | h) learns, and the step returns no gradient, so no DlvmBackward
crosses the wire; "finetune" (not the paper's) returns the experts' gradients for the encoders.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from vfl_core.data.missingness import UNLABELLED
from vfl_core.errors import ProtocolError, StaleRoundError
from vfl_core.methods.dlvm import latent_math as dm
from vfl_core.methods.dlvm.messages import Decoded, PartyGrads, Stage, StepCall, StepResult
from vfl_core.methods.dlvm.models import ActiveModels
from vfl_core.methods.dlvm.sampling import (
    content_key,
    from_wire,
    grad_of,
    kept_experts,
    noise,
    posterior,
    to_wire,
)
from vfl_core.model.model_bank import make_optimizer

if TYPE_CHECKING:
    from vfl_core.methods.party_port import PartyPort


@dataclass
class _Draw:
    """The active party's latent samples of a step, with the graph to the experts."""

    experts: dict[int, torch.Tensor]  # block -> (B, 2d) leaves
    h: torch.Tensor  # (B, S, d)
    own: torch.Tensor  # (B, S): log p(z) + log p(h | z) - log q(z | h) - log q(h | x_O)


class ActiveParty:
    """The active party's networks, their optimisers and its last training step."""

    def __init__(self, party: PartyPort, models: ActiveModels) -> None:
        self.party = party
        self.config = party.config
        self.models = models
        self.generative_opt = make_optimizer(models.generative, self.config)
        self.classifier_opt = make_optimizer(models.classifier, self.config)
        self._last: tuple[int, bytes, StepResult] | None = None  # the last training step

    @property
    def d(self) -> int:
        return self.config.dlvm.latent_dim

    def labelled_rows(self) -> np.ndarray:
        """The training rows this party holds a label for (stage 2 plans over them)."""
        labels = self.party.split("train").labels
        if labels is None:
            raise ProtocolError(f"party {self.party.party_id} holds no labels")
        return np.flatnonzero(labels != UNLABELLED).astype(np.int64)

    def step(self, call: StepCall) -> StepResult:
        """Stage 1: maximise the importance-weighted bound; stage 2: the classifier's SNIS
        log-likelihood of the labels. A retry of the last step gets its answer again."""
        if call.stage == Stage.PREDICT:
            raise ProtocolError("step: the predict stage is asked with DlvmPredict")
        key = content_key(call.stage, call.samples, call.experts, call.answers, call.rows)
        if self._last is not None:
            last, last_key, result = self._last
            if call.round_id < last:
                raise StaleRoundError(f"step for round {call.round_id}: party is at round {last}")
            if call.round_id == last:
                if key != last_key:
                    raise ProtocolError(f"round {call.round_id}: step repeated with other content")
                return result
        self._known_blocks(call)
        finetune = call.stage == Stage.BOUND or self.config.dlvm.stage2 == "finetune"
        draw = self._draw(call, train=True, expert_grads=finetune)
        if call.stage == Stage.BOUND:
            result = self._bound_step(call, draw)
        else:
            result = self._classifier_step(call, draw, finetune)
        self._last = (call.round_id, key, result)
        return result

    def predict(self, call: StepCall) -> np.ndarray:
        """SNIS class probabilities sum_l w~_l p(y | h_l), (B, C) (or, with predict "average",
        equal weights)."""
        if call.stage != Stage.PREDICT:
            raise ProtocolError(f"predict with stage {int(call.stage)}")
        with torch.no_grad():
            draw = self._draw(call, train=False, expert_grads=False)
            log_w = self._log_weights(draw, call.answers, train=False)[0]  # (B, L)
            if self.config.dlvm.predict == "average":
                log_w = torch.zeros_like(log_w)
            self.models.eval()
            probs = torch.exp(self.models.class_log_probs(draw.h))  # (B, L, C)
            # float32 rounding lifts a confident class's weighted sum up to ~2e-7 above 1, and
            # the label parties refuse scores outside [0, 1] (the batch would go unscored)
            return to_wire(dm.snis(log_w, probs).clamp(0.0, 1.0))

    def _draw(self, call: StepCall, train: bool, expert_grads: bool) -> _Draw:
        """Redraw the coordinator's latent samples from the experts, with the graph to them
        (to the experts themselves only when their gradients are wanted)."""
        if not call.experts:
            raise ProtocolError("step: no expert")
        if call.samples < 1:
            raise ProtocolError(f"step: {call.samples} samples")
        batch = next(iter(call.experts.values())).shape[0]
        cfg, seed = self.config.dlvm, self.config.seed
        experts = {
            b: from_wire(e, (batch, 2 * self.d), f"expert of block {b}").requires_grad_(
                expert_grads
            )
            for b, e in sorted(call.experts.items())
        }
        shape, dims = (batch, call.samples), (self.d, cfg.z_dim)
        noise_h, noise_z = noise(seed, int(call.stage), call.round_id, shape, dims)
        kept = kept_experts(sorted(experts), seed, call.stage, call.round_id, cfg.expert_dropout)
        self.models.train(train)
        with torch.set_grad_enabled(train):
            mean, logvar, h = posterior(experts, noise_h, kept, cfg.posterior)  # (B, S, d)
            log_q = dm.gaussian_log_prob(h, mean.unsqueeze(1), logvar.unsqueeze(1))  # (B, S)
            own = self.models.prior_terms(h, noise_z) - log_q
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

    def _bound_step(self, call: StepCall, draw: _Draw) -> StepResult:
        log_w, leaves = self._log_weights(draw, call.answers, train=True)
        loss = -dm.iwae_bound(log_w).mean()
        self.generative_opt.zero_grad(set_to_none=True)
        loss.backward()
        self.generative_opt.step()
        blocks = sorted({*draw.experts, *leaves})
        grads = {
            b: PartyGrads(
                None if b not in leaves else to_wire(grad_of(leaves[b])),
                None if b not in draw.experts else to_wire(grad_of(draw.experts[b])),
            )
            for b in blocks
        }
        return StepResult(float(loss.detach()), grads)

    def _classifier_step(self, call: StepCall, draw: _Draw, finetune: bool) -> StepResult:
        """maximise log sum_s w~_s p(y | h_s) over the batch (weights held fixed); the experts'
        gradients go back only when the encoders fine-tune."""
        y = self._labels(call, draw.h.shape[0])
        with torch.no_grad():
            log_w = self._log_weights(draw, call.answers, train=False)[0]
        log_py = self.models.class_log_probs(draw.h)  # (B, S, C)
        picked = log_py.gather(2, y.view(-1, 1, 1).expand(-1, draw.h.shape[1], 1)).squeeze(2)
        loss = -torch.logsumexp(torch.log_softmax(log_w, dim=1) + picked, dim=1).mean()
        self.classifier_opt.zero_grad(set_to_none=True)
        loss.backward()
        self.classifier_opt.step()
        if not finetune:  # the paper's stage 2: Theta_g frozen, nothing to send back
            return StepResult(float(loss.detach()))
        grads = {b: PartyGrads(None, to_wire(grad_of(e))) for b, e in draw.experts.items()}
        return StepResult(float(loss.detach()), grads)

    def _labels(self, call: StepCall, batch: int) -> torch.Tensor:
        """The labels of the step's rows, (B,) int64, checked against the round's digest."""
        if call.rows is None:
            raise ProtocolError("classifier step without the active party's rows")
        self.party.check_digest("train", call.rows, call.digest)
        if len(call.rows) != batch:
            raise ProtocolError(f"classifier step: {len(call.rows)} rows for {batch} samples")
        labels = self.party.split("train").labels
        assert labels is not None
        y = torch.from_numpy(labels[call.rows])
        if (y == UNLABELLED).any():
            raise ProtocolError("classifier step: the batch holds an unlabelled row")
        return y

    def _known_blocks(self, call: StepCall) -> None:
        num_blocks = self.party.data.meta.num_blocks
        blocks = {*call.experts, *call.answers}
        if any(not 0 <= b < num_blocks for b in blocks):
            raise ProtocolError(f"step: blocks {sorted(blocks)} outside 0..{num_blocks - 1}")

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        return {
            "active": self.models.state_dict(),
            "active_opt": self.generative_opt.state_dict(),
            "classifier_opt": self.classifier_opt.state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.models.load_state_dict(state["active"])
        self.generative_opt.load_state_dict(state["active_opt"])
        self.classifier_opt.load_state_dict(state["classifier_opt"])
        self._last = None
