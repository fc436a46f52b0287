"""What a training round and an inference batch come to, as the round engine and every method's
round program report them: `RoundRecord`, `PredictionBatch`, and the check on a party's answer.

They live in the methods layer so that a method's program (vfl_core.methods.*.program) can build
them without importing the round engine above it (vfl_core.training).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from vfl_core.data.batch_plan import Batch
from vfl_core.protocol import BlindPrediction, SamplePrediction, Sealed


@dataclass(frozen=True)
class RoundRecord:
    round_id: int
    epoch: int
    pattern: tuple[int, ...]  # the batch's observed set
    present: tuple[int, ...]  # blocks whose embeddings were used
    losses: dict[int, float]  # head block -> sampled loss L_k
    updated: tuple[int, ...]  # blocks that acknowledged Backward

    def to_json(self) -> dict[str, object]:
        """The round as the coordinator logs it (one line of rounds.jsonl)."""
        return {
            "round": self.round_id,
            "epoch": self.epoch,
            "pattern": list(self.pattern),
            "present": list(self.present),
            "losses": {str(k): v for k, v in self.losses.items()},
            "updated": list(self.updated),
        }


@dataclass(frozen=True)
class PredictionBatch:
    index: np.ndarray  # key indices into the split's alignment, (B,)
    pattern: tuple[int, ...]  # blocks holding these samples
    present: tuple[int, ...]  # blocks whose embeddings were used (the observed set O')
    party_probs: dict[int, np.ndarray]  # head block -> (B, C); regression (B, 1) values
    federation: np.ndarray | None  # (B, C), mean of the heads' probabilities (None: no head)
    predicted: np.ndarray | None = None  # (B,) the federation's class (regression: value)
    scored: dict[str, np.ndarray] = field(default_factory=dict)  # predictor -> (B,) classes
    scores: dict[str, np.ndarray] = field(default_factory=dict)  # binary: positive-class prob.
    regression: bool = False
    # parties of the pattern that the validation choice leaves out (vfl_core.inference.choice)
    dropped: tuple[int, ...] = ()
    # an evaluation of an encrypted relay: the prediction the label party combines and scores
    # (vfl_core.inference.blind); `federation` and `predicted` are then None
    blind: BlindPrediction | None = None

    def samples(self, keys: Sequence[bytes]) -> list[SamplePrediction]:
        """One SamplePrediction per sample of the batch."""
        out = []
        for j, i in enumerate(self.index):
            fed = None if self.federation is None else self.federation[j]
            value = None if self.predicted is None else self.predicted[j]
            out.append(
                SamplePrediction(
                    id_hash=keys[int(i)],
                    observed=self.present,
                    party_probs={b: p[j] for b, p in self.party_probs.items()},
                    federation=fed,
                    predicted_class=-1 if value is None or self.regression else int(value),
                    predicted_value=float(value) if value is not None and self.regression else None,
                )
            )
        return out


class CombinedAnswer(Protocol):
    """The federation's answer for a batch (vfl_core.methods.combination.Combined has it)."""

    @property
    def scored(self) -> dict[str, np.ndarray]: ...
    @property
    def federation(self) -> np.ndarray: ...
    @property
    def predicted(self) -> np.ndarray: ...
    @property
    def scores(self) -> dict[str, np.ndarray]: ...


def batch_prediction(
    batch: Batch,
    present: tuple[int, ...],
    probs: dict[int, np.ndarray],
    combined: CombinedAnswer | None,
    regression: bool,
) -> PredictionBatch:
    """The batch's prediction; without a combined one (no head answered), none."""
    if combined is None:
        return PredictionBatch(
            batch.index, batch.pattern, present, probs, None, regression=regression
        )
    return PredictionBatch(
        batch.index,
        batch.pattern,
        present,
        probs,
        combined.federation,
        combined.predicted,
        combined.scored,
        combined.scores,
        regression,
    )


def well_formed(array: np.ndarray | Sealed | None, shape: tuple[int, int]) -> bool:
    """A party's answer has the shape asked for, float32 and finite values only (a sealed one:
    the shape; its consumer checks the values once it has opened it)."""
    if isinstance(array, Sealed):
        return array.shape == shape
    return (
        array is not None
        and array.dtype == np.float32
        and array.shape == shape
        and bool(np.isfinite(array).all())
    )
