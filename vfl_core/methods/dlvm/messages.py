"""The messages of the latent-variable VFL (vfl_core.methods.dlvm), independent of any
transport.

A round reuses Embed for each party's Gaussian expert of h ([mean | log-variance], (B, 2d)), then:

- `DecodeCall` to each party: the latent samples h, (B, S, d), drawn by the coordinator from the
  product of the experts that answered; the party returns log p(x_k | h) (plus log p(m_k | h)
  with MNAR), (B, S), and in training its gradient in h, (B, S, d).
- `StepCall` to the active party: the experts and the decoders' answers; it redraws the same h
  (same experts, same seeded noise), computes the bound (stage 1) or the classifier's loss
  (stage 2), steps its own networks and returns each party's gradients (`PartyGrads`); at
  inference it returns the SNIS class probabilities instead.
- `DlvmBackwardCall` to each party: its gradients, through which it backpropagates and steps.

Arrays are CPU numpy float32, rows int64. No feature and no label is in any of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np


class Stage(IntEnum):
    """What a step computes; the values name the noise streams (part of the reproducibility
    contract) and travel on the wire."""

    BOUND = 1  # stage 1: the importance-weighted bound over every sample
    CLASSIFIER = 2  # stage 2: the classifier (and encoders) on the active party's labelled rows
    PREDICT = 3  # inference: self-normalised importance sampling


@dataclass(frozen=True)
class DecodeCall:
    """Log-likelihood terms of a party at the latent samples h of a batch."""

    round_id: int  # the training round, or the inference request
    split: str
    rows: np.ndarray | None  # (B,) int64 the party's rows; None: it does not hold the batch (MNAR)
    digest: bytes  # as in EmbedCall (b"" when rows is None)
    h: np.ndarray  # (B, S, d) float32
    train: bool  # keep the decoder's graph and return the gradient in h


@dataclass(frozen=True)
class Decoded:
    """A party's answer to Decode: log-likelihood terms (B, S) and their gradient in h
    (B, S, d); the gradient is None outside training."""

    log_lik: np.ndarray
    grad: np.ndarray | None = None


@dataclass(frozen=True)
class StepCall:
    """The active party's step on a batch: redraw h from `experts` with the noise of
    (stage, round_id), weigh it with the decoders' `answers`, and train (stages 1 and 2) or
    predict. `rows`/`digest`: the active party's rows of the batch (stage 2: its labels)."""

    round_id: int
    epoch: int
    stage: Stage
    samples: int  # S: kappa in training, L at inference
    experts: dict[int, np.ndarray]  # block -> (B, 2d)
    answers: dict[int, Decoded]  # block -> its Decode answer
    rows: np.ndarray | None = None  # (B,) int64
    digest: bytes = b""


@dataclass(frozen=True)
class PartyGrads:
    """What the active party's step returns for party k."""

    log_lik: np.ndarray | None  # dL/d(log-likelihood terms), (B, S); None: no term (stage 2)
    expert: np.ndarray | None  # dL/d[mean | logvar], (B, 2d); None: k sent no expert


@dataclass(frozen=True)
class StepResult:
    loss: float
    grads: dict[int, PartyGrads] = field(default_factory=dict)


@dataclass(frozen=True)
class DlvmBackwardCall:
    """Backpropagate the active party's gradients through the party's decoder and encoder."""

    round_id: int
    epoch: int
    grads: PartyGrads


@dataclass(frozen=True)
class LabelledRowsCall:
    """Which training rows the (active) party holds a label for; `samples`: its train rows, as
    the coordinator knows them (the answer must lie below)."""

    split: str = "train"
    samples: int = 0
    round_id: int = 0
