"""The learning rate by epoch (TrainConfig.scheduler), as every party steps it (ModelBank.set_lr)
and the tabular benchmark's central MLP mirrors it. Torch-free."""

from __future__ import annotations

import math

# "decay": the learning rate halves every this many epochs, whatever the epoch ceiling (the
# tabular default: docs/tabular-defaults.md, "Time to a model").
DECAY_HALF_LIFE = 16.0


def lr_at(lr: float, schedule: str, epoch: int, epochs: int) -> float:
    """The learning rate of `epoch` (0-based) under `schedule`: "none" `lr`; "cosine" from `lr`
    down to 0 at the ceiling `epochs`; "decay" halved every DECAY_HALF_LIFE epochs."""
    if schedule == "cosine" and epochs > 0:
        return lr * 0.5 * (1.0 + math.cos(math.pi * min(epoch, epochs) / epochs))
    if schedule == "decay":
        return lr * 0.5 ** (epoch / DECAY_HALF_LIFE)
    return lr
