"""Early stopping on a validation share of the training samples (TrainConfig.early_stop_patience).

The coordinator holds out `validation_fraction` of the aligned training samples that a label
party holds, drawn from the seed (`hold_out`); they leave the batch plan and are scored by the
label parties after every epoch, like the test split (only aggregates leave them). An epoch whose
validation accuracy beats every earlier one is the best so far: every party keeps a copy of its
state in memory (`Party.keep_snapshot`; a client with a checkpoint directory also on disk, so
that it survives a restart: vfl_client.host). After `patience` epochs without a better one training
stops, and at the end every party goes back to its copy of the best epoch
(`Party.restore_snapshot`), so the weights a run ends with are those of its best epoch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from vfl_core.errors import ConfigError
from vfl_core.seeding import Stream, rng


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
    """The validation accuracy of each epoch and the best epoch so far (epochs 0-based)."""

    patience: int
    validation_samples: int = 0
    history: list[tuple[int, float | None]] = field(default_factory=list)  # (epoch, accuracy)
    best_epoch: int = -1
    best_accuracy: float = float("nan")
    best_round: int = -1  # the last round of the best epoch: the parties' kept state
    waited: int = 0  # epochs since the best one
    stopped_epoch: int | None = None  # the epoch after which training stopped (None: ran all)
    kept: list[int] = field(default_factory=list)  # blocks that kept their best state
    restored: list[int] = field(default_factory=list)  # blocks that went back to it at the end

    def observe(self, epoch: int, accuracy: float | None, last_round: int) -> bool:
        """Record an epoch's validation accuracy (None: nothing was scored); True when it beats
        every earlier epoch (strictly: a tie keeps the earlier, shorter-trained weights)."""
        self.history.append((epoch, accuracy))
        if accuracy is not None and (self.best_epoch < 0 or accuracy > self.best_accuracy):
            self.best_epoch, self.best_accuracy, self.best_round = epoch, accuracy, last_round
            self.waited = 0
            return True
        self.waited += 1
        return False

    @property
    def due(self) -> bool:
        """Whether `patience` epochs have passed without a better validation accuracy."""
        return self.waited >= self.patience

    def to_json(self) -> dict[str, object]:
        """What results.json and the coordinator's checkpoint record (epochs 1-based in
        `history`, as the logs name them)."""
        out = asdict(self)
        out["history"] = [[e + 1, a] for e, a in self.history]
        return out

    @classmethod
    def from_json(cls, saved: dict) -> EarlyStop:
        history = [(int(e) - 1, None if a is None else float(a)) for e, a in saved["history"]]
        return cls(**{**saved, "history": history})
