"""Early stopping of DVFL's label owner (DvflConfig.owner_patience), as the DVFL paper trains the
owner in its limited-label runs: up to `owner_epochs` epochs, stopped once the held-out labelled
rows' accuracy has not improved for `owner_patience` epochs, ending with the best epoch's weights.
With `owner_min_epochs` M the owner trains at least M epochs and only epochs from the M-th on are
candidates for the best: on a few held-out rows (25 at 128 labels) the accuracy moves in steps of
4 points, and a lucky early epoch would otherwise end the run (docs/methods/dvfl.md).

The validation rows are `owner_validation` of the owner's labelled rows (at least one), drawn
from the seed; the owner does not train on them. Which rows the paper held out is not stated:
taking them from the few labels is this project's choice (docs/methods/dvfl.md).
Everything stays inside the owner's party: no message carries a validation label or score.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from vfl_core.seeding import Stream, rng


@dataclass
class OwnerStop:
    patience: int
    fraction: float
    seed: int
    min_epochs: int = 0  # no stop, and no best, before this many epochs
    validation: np.ndarray | None = None  # (V,) train rows held out, ascending
    best: float = -1.0  # best validation accuracy so far
    best_epoch: int = -1
    best_state: dict[str, Any] | None = None
    stopped: bool = False
    history: list[float] = field(default_factory=list)

    def split(self, labelled: np.ndarray) -> np.ndarray:
        """The rows to train on: `labelled` (ascending) minus the validation rows, which are
        drawn once, from the first epoch's labelled rows."""
        if self.validation is None:
            size = min(max(1, round(self.fraction * len(labelled))), len(labelled) - 1)
            order = rng(self.seed, Stream.DVFL_OWNER_PLAN, -1).permutation(labelled)
            self.validation = np.sort(order[:size]) if size > 0 else labelled[:0]
        return np.setdiff1d(labelled, self.validation)

    def after_epoch(self, net: torch.nn.Module, epoch: int, accuracy: float, last: bool) -> None:
        """Record an epoch's validation accuracy; keep the best weights; stop after `patience`
        epochs without a better one, or at the `last` epoch, with the best weights restored.
        Epochs before the `min_epochs`-th (`epoch` counts from 0) only train."""
        self.history.append(accuracy)
        if epoch + 1 < self.min_epochs and not last:
            return
        if accuracy > self.best:
            self.best, self.best_epoch = accuracy, epoch
            self.best_state = copy.deepcopy(net.state_dict())
        if last or epoch - self.best_epoch >= self.patience:
            self.stopped = True
            if self.best_state is not None:
                net.load_state_dict(self.best_state)

    def state_dict(self) -> dict[str, Any]:
        return {
            "validation": self.validation,
            "best": self.best,
            "best_epoch": self.best_epoch,
            "best_state": self.best_state,
            "stopped": self.stopped,
            "history": list(self.history),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key, value in state.items():
            setattr(self, key, value)
