"""The round engine as the inference layer's choices see it: the methods' port
(vfl_core.methods.federation_port), `evaluate` and `evaluate_many`.
vfl_core.training.engine.Federation satisfies it; the inference layer sits below the training
layer and does not import it."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from vfl_core.methods.federation_port import FederationPort

if TYPE_CHECKING:
    from vfl_core.inference.chosen import ValidationChoice
    from vfl_core.inference.metrics import EvalReport


@dataclass(frozen=True)
class Ask:
    """One evaluation of `evaluate_many`: `evaluate`'s arguments, and the validation choice in
    effect for it (None: the run's, fed.choice)."""

    split: str = "test"
    blocks: Collection[int] | None = None
    index: np.ndarray | None = None
    federation_scores: bool = False
    head: str | None = None
    choice: ValidationChoice | None = None


class EvaluatingFederation(FederationPort, Protocol):
    def evaluate(
        self,
        split: str = "test",
        blocks: Collection[int] | None = None,
        index: np.ndarray | None = None,
        federation_scores: bool = False,
        head: str | None = None,
    ) -> EvalReport:
        """Metrics of `split` (or of its key indices `index`) by observed set, from every live
        party or only those of `blocks`, with the heads `head` names (PredictCall.head; None:
        those the validation chose)."""
        ...

    def evaluate_many(self, asks: Sequence[Ask]) -> list[EvalReport]:
        """The reports of independent evaluations, in order: each as `evaluate` would make it
        in turn (one fan-out for several of them on the direct plane)."""
        ...
