"""An evaluation's blind batches, scored together (issue 32; vfl_core.inference.blind).

Under an encrypted relay the coordinator holds no per-row prediction, but every Score answer is
an aggregate over the rows its call names: a batch's confusion counts name the class of each of
its rows when they are all of one class (a small observed set's batch can be). So no blind batch
is scored on its own: the evaluator keeps them here, grouped by what the report adds them under
(the observed set, with the parties the validation choice left out) and by what predicted them
(the parties present and the heads that answered, hence the predictors named), and once the
evaluation's last batch is predicted it has a label party score each group in one call. The
coordinator then learns, per observed set and predictor, what the report shows anyway: counts
over all the evaluation's rows of that set.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass, field, replace

import numpy as np

from vfl_core.methods.outcomes import PredictionBatch
from vfl_core.protocol import BlindPrediction

# What a group is keyed by: the report's observed set, the parties present, those the choice
# left out, the heads that answered and the name of a random guess.
GroupKey = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...], str]


@dataclass
class BlindGroup:
    """Blind batches that one Score call scores: their rows in order, and each one's part."""

    pattern: tuple[int, ...]  # the observed set the report adds them under
    present: tuple[int, ...]
    served: Collection[int] | None  # the blocks that may be called (None: every live one)
    batches: list[PredictionBatch] = field(default_factory=list)

    @property
    def index(self) -> np.ndarray:
        """The key indices of every batch, in order."""
        return np.concatenate([b.index for b in self.batches])

    def parts(self, federation_scores: bool) -> tuple[BlindPrediction, ...]:
        """Each batch's prediction, sized to its rows."""
        out = []
        for b in self.batches:
            assert b.blind is not None
            out.append(replace(b.blind, federation_scores=federation_scores, size=len(b.index)))
        return tuple(out)


class BlindScores:
    """The blind batches of one evaluation, by group, in the order each group was first seen."""

    def __init__(self) -> None:
        self._groups: dict[GroupKey, BlindGroup] = {}

    def add(
        self, pattern: tuple[int, ...], pred: PredictionBatch, served: Collection[int] | None
    ) -> None:
        blind = pred.blind
        assert blind is not None
        key = (pattern, pred.present, pred.dropped, tuple(sorted(blind.heads)), blind.guess)
        group = self._groups.setdefault(key, BlindGroup(pattern, pred.present, served))
        group.batches.append(pred)

    def __iter__(self) -> Iterator[BlindGroup]:
        return iter(self._groups.values())
