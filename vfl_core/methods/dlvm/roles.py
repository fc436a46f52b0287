"""The latent-variable VFL inside one party process (vfl_core.methods.dlvm.latent_math has the
model's math).

Every party k holds an encoder, its Gaussian expert q_k(h | x_k), and a decoder p(x_k | h)
(with MNAR also p(m_k | h), whether it holds a sample). A label party also holds q(z | h),
p(h | z) and the classifier p(y | h); the lowest label block is the active party, the one the
coordinator asks to step. What a party computes in a round (vfl_core.methods.dlvm.messages):

- Embed: [mean | logvar] of its expert for its rows, (B, 2d), keeping the graph in training;
- Decode: log p(x_k | h) at the coordinator's latent samples h, (B, S), and its gradient in h;
- Step (the active party, vfl_core.methods.dlvm.active): the bound or the classifier's loss from
  the experts and the decoders' answers; it steps its own networks and returns the parties'
  gradients (none in the paper's frozen stage 2);
- Backward: backpropagate those gradients through its decoder and encoder, and step.

Every call of the current round answers a retry with the same answer; other content for the
same round is refused, and an earlier round is stale (as for a Party's Embed/Fuse/Backward).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from vfl_core.errors import ConfigError, ProtocolError, StaleRoundError
from vfl_core.methods.dlvm.active import ActiveParty
from vfl_core.methods.dlvm.messages import (
    DecodeCall,
    Decoded,
    DlvmBackwardCall,
    StepCall,
    StepResult,
)
from vfl_core.methods.dlvm.models import ActiveModels, BlockModels
from vfl_core.methods.dlvm.sampling import content_key, from_wire, to_wire
from vfl_core.model.model_bank import make_optimizer
from vfl_core.protocol import EmbedCall

if TYPE_CHECKING:
    from vfl_core.methods.party_port import PartyPort
    from vfl_core.methods.spec import RunConfig

log = logging.getLogger(__name__)


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
        self.config: RunConfig = party.config
        cfg = self.config.dlvm
        likelihood = "bernoulli" if meta.kind == "image" else "gaussian"
        seed = self.config.seed
        self.models = BlockModels(cfg, meta.block, meta.feature_shape, likelihood, seed)
        self.models.to(party.device)
        self.opt = make_optimizer(self.models, self.config)
        self.active: ActiveModels | None = None
        self.lead: ActiveParty | None = None  # the active party's step, at a label party
        if meta.has_labels:
            self.active = ActiveModels(cfg, meta.block, meta.num_classes, seed)
            self.lead = ActiveParty(party, self.active)
        self._round: _Round | None = None

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
        key = content_key(call.h)
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
            x = None
            if call.rows is not None:
                x = self.party.batch(call.split, call.rows, call.digest).flatten(1)
                terms = self.models.decoder.log_prob(x, leaf)
            if self.config.dlvm.mnar:
                terms = terms + self.models.missing_log_prob(x, leaf)
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
        return self._lead().labelled_rows()

    def step(self, call: StepCall) -> StepResult:
        return self._lead().step(call)

    def predict(self, call: StepCall) -> np.ndarray:
        return self._lead().predict(call)

    def _lead(self) -> ActiveParty:
        if self.lead is None:
            raise ProtocolError(f"party {self.party.party_id} holds no labels: it is not active")
        return self.lead

    # ------------------------------------------------------------------ state
    def modules(self) -> list[torch.nn.Module]:
        return [self.models] if self.active is None else [self.models, self.active]

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"models": self.models.state_dict(), "opt": self.opt.state_dict()}
        return state if self.lead is None else state | self.lead.state_dict()

    def load_state_dict(self, state: Mapping[str, Any], last_round: int = -1) -> None:
        self.models.load_state_dict(state["models"])
        self.opt.load_state_dict(state["opt"])
        if self.lead is not None:
            self.lead.load_state_dict(state)
        self._round = None
