"""The test metric for every observed set of parties, and so the effect of dropping each party.

After training, the split is evaluated once per subset S of the parties with only the parties of
S called (`Federation.evaluate(split, blocks=S)`): each sample is predicted from the blocks of S
that hold it, exactly as if the other parties were gone, and scored by a label party of S as
usual (labels never leave it). Samples that no party of S holds are counted as unscored.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

from vfl_core.inference.federation_view import Ask, EvaluatingFederation
from vfl_core.inference.metrics import MetricRow
from vfl_core.methods.liveness import DOWN

log = logging.getLogger(__name__)

# Up to this many parties every non-empty subset is evaluated (2^6 - 1 = 63 evaluations of the
# test split); beyond it the full set and each leave-one-out set only (K + 1 evaluations).
MAX_ALL_SUBSETS = 6


@dataclass(frozen=True)
class SubsetResult:
    blocks: tuple[int, ...]  # the parties called
    samples: int  # samples scored
    unscored: int  # samples no party of `blocks` could predict
    # the overall test metrics of the set, as in MetricRow: those of the other task are None
    accuracy: float | None = None
    federation_accuracy: float | None = None
    f1: float | None = None
    auc: float | None = None
    rmse: float | None = None
    mae: float | None = None
    r2: float | None = None
    federation_rmse: float | None = None
    brier: float | None = None

    @classmethod
    def of(cls, blocks: tuple[int, ...], unscored: int, row: MetricRow) -> SubsetResult:
        metrics = {k: v for k, v in row.__dict__.items() if k not in ("observed", "samples")}
        return cls(blocks, row.samples, unscored, **metrics)

    def value(self, key: str) -> float | None:
        """The metric named `key` (vfl_core.inference.headline), None when nothing was scored."""
        value = getattr(self, key)
        return value if self.samples else None

    def to_json(self) -> dict[str, object]:
        """Metrics that do not apply to the task are left out, as in MetricRow.to_json."""
        out = {k: v for k, v in self.__dict__.items() if v is not None}
        return {**out, "blocks": list(self.blocks)}


def observed_subsets(blocks: Sequence[int]) -> list[tuple[int, ...]]:
    """Full set first, then larger before smaller, each size in lexicographic order."""
    blocks = sorted(blocks)
    if len(blocks) <= MAX_ALL_SUBSETS:
        sizes = range(len(blocks), 0, -1)
        return [s for size in sizes for s in combinations(blocks, size)]
    full = tuple(blocks)
    return [full, *(tuple(b for b in blocks if b != drop) for drop in blocks)]


def evaluate_subsets(fed: EvaluatingFederation, split: str = "test") -> list[SubsetResult]:
    """One evaluation of `split` per observed subset of the parties that are not down. A party
    marked down is left out of every set: calling it would cost a deadline per retry, 15 times
    over, to learn what its absence already says."""
    live = [b for b in sorted(fed.infos) if fed.liveness.state.get(b) != DOWN]
    if len(live) < len(fed.infos):
        log.info("sets of parties without %s (down)", sorted(set(fed.infos) - set(live)))
    subsets = observed_subsets(live)  # independent: together (one fan-out on the direct plane)
    reports = fed.evaluate_many([Ask(split, subset) for subset in subsets])
    return [
        SubsetResult.of(subset, report.unscored, report.overall())
        for subset, report in zip(subsets, reports, strict=True)
    ]
