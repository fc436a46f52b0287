"""Early stopping on a validation share of the training samples (TrainConfig.early_stop_patience).

The coordinator holds out `validation_fraction` of the aligned training samples that a label
party holds, drawn from the seed (`hold_out`); they leave the batch plan and are scored by the
label parties after every epoch, like the test split (only aggregates leave them). An epoch
whose validation metric (vfl_core.inference.metrics.watched: accuracy, Brier score for binary tasks,
RMSE for regression) beats every earlier one is the best so far: every party keeps a copy of its
state in memory (`Party.keep_snapshot`; a client with a checkpoint directory also on disk, so
that it survives a restart: vfl_client.host). After `patience` epochs without a better one
training stops (an epoch resets that count only if it beats the value that last reset it by
`min_improvement` of that value: smaller gains update the best epoch, not the waiting; and not
before `min_epochs` epochs are scored), and at
the end every party goes back to its copy of the best epoch
(`Party.restore_snapshot`), so the weights a run ends with are those of its best epoch. The same
samples then choose the subsets and the decision threshold (vfl_core.inference.choice).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from vfl_core.errors import ConfigError
from vfl_core.inference.headline import LOWER_IS_BETTER, watched
from vfl_core.seeding import Stream, rng

__all__ = ["LOWER_IS_BETTER", "EarlyStop", "hold_out", "watched"]  # watched: headline's


def hold_out(scorable: np.ndarray, seed: int, fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """(training, validation) key indices, ascending, of an alignment whose keys a label party
    holds where `scorable` (N,) is True: round(fraction x scorable) of those, drawn from the
    seed, are held out; the rest, and every sample no label party holds, train."""
    candidates = np.flatnonzero(scorable)
    size = round(fraction * len(candidates))
    if size < 1 or size >= len(candidates):
        raise ConfigError(
            f"early stopping holds out validation_fraction {fraction:g} of the {len(candidates)} "
            "training samples a label party holds: that leaves no validation or no training "
            "sample"
        )
    held = np.zeros(len(scorable), dtype=bool)
    held[rng(seed, Stream.VALIDATION).permutation(candidates)[:size]] = True
    return np.flatnonzero(~held), np.flatnonzero(held)


@dataclass
class EarlyStop:
    """The validation metric of each epoch and the best epoch so far (epochs 0-based)."""

    patience: int
    validation_samples: int = 0
    history: list[tuple[int, float | None]] = field(default_factory=list)  # (epoch, value)
    best_epoch: int = -1
    best_value: float = float("nan")
    metric: str = "accuracy"  # a MetricRow field: `watched`
    best_round: int = -1  # the last round of the best epoch: the parties' kept state
    waited: int = 0  # epochs since one beat `reference` by `min_improvement`
    # an epoch resets `waited` only if it beats `reference` (the value of the last epoch that
    # did) by this share of it; 0: any better epoch does (strictly)
    min_improvement: float = 0.0
    reference: float = float("nan")
    min_epochs: int = 0  # epochs scored before the patience may end training
    stopped_epoch: int | None = None  # the epoch after which training stopped (None: ran all)
    kept: list[int] = field(default_factory=list)  # blocks that kept their best state
    restored: list[int] = field(default_factory=list)  # blocks that went back to it at the end

    @property
    def best_accuracy(self) -> float:
        """The best validation value (accuracy for classification: the historic name)."""
        return self.best_value

    def observe(self, epoch: int, value: float | None, last_round: int) -> bool:
        """Record an epoch's validation value (None: nothing was scored); True when it beats
        every earlier epoch (strictly: a tie keeps the earlier, shorter-trained weights). The
        patience starts again only where it beats `reference` by `min_improvement`."""
        self.history.append((epoch, value))
        if value is None:
            self.waited += 1
            return False
        first = self.best_epoch < 0
        if first or self._better(value, self.reference, self.min_improvement):
            self.reference, self.waited = value, 0
        else:
            self.waited += 1
        if first or self._better(value, self.best_value, 0.0):
            self.best_epoch, self.best_value, self.best_round = epoch, value, last_round
            return True
        return False

    def _better(self, value: float, than: float, share: float) -> bool:
        """Whether `value` beats `than` by more than `share` of it (strictly when 0)."""
        margin = share * abs(than)
        if self.metric in LOWER_IS_BETTER:
            return value < than - margin
        return value > than + margin

    @property
    def due(self) -> bool:
        """Whether `patience` epochs have passed without a better validation accuracy (and
        `min_epochs` have been scored)."""
        return self.waited >= self.patience and len(self.history) >= self.min_epochs

    def to_json(self) -> dict[str, object]:
        """What results.json and the coordinator's checkpoint record: epochs 1-based, as the
        logs name them (`history`, `best_epoch`, None before any epoch is scored, and
        `stopped_epoch`; `epochs_from: 1` says so)."""
        out = asdict(self)
        out["history"] = [[e + 1, a] for e, a in self.history]
        out["best_epoch"] = self.best_epoch + 1 if self.best_epoch >= 0 else None
        out["stopped_epoch"] = None if self.stopped_epoch is None else self.stopped_epoch + 1
        out["epochs_from"] = 1
        return out

    @classmethod
    def from_json(cls, saved: dict) -> EarlyStop:
        history = [(int(e) - 1, None if a is None else float(a)) for e, a in saved["history"]]
        saved = dict(saved)
        if "best_accuracy" in saved:  # checkpoints written before regression early stopping
            saved["best_value"] = saved.pop("best_accuracy")
        if saved.pop("epochs_from", 0) == 1:  # else a checkpoint that wrote them 0-based
            best, stopped = saved["best_epoch"], saved["stopped_epoch"]
            saved["best_epoch"] = -1 if best is None else int(best) - 1
            saved["stopped_epoch"] = None if stopped is None else int(stopped) - 1
        if "reference" not in saved:  # written before the minimum improvement: any gain
            saved["reference"] = saved["best_value"]
        return cls(**{**saved, "history": history})
