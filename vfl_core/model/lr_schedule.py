"""The learning rate by epoch (TrainConfig.scheduler), as every party steps it (ModelBank.set_lr)
and the tabular benchmark's central MLP mirrors it. Torch-free."""

from __future__ import annotations

import math

# "decay": the learning rate halves every this many epochs, whatever the epoch ceiling (the
# tabular default: docs/tabular-defaults.md, "Time to a model").
DECAY_HALF_LIFE = 16.0
# "decay": a linear warm-up over this many first epochs (Goyal et al. 2017, s. 2.2: epoch e at
# (e + 1) / DECAY_WARMUP of the rate); 0: none.
DECAY_WARMUP = 0


def lr_at(lr: float, schedule: str, epoch: int, epochs: int) -> float:
    """The learning rate of `epoch` (0-based) under `schedule`: "none" `lr`; "cosine" from `lr`
    down to 0 at the ceiling `epochs`; "decay" halved every DECAY_HALF_LIFE epochs (after a
    warm-up of DECAY_WARMUP epochs, if any)."""
    if schedule == "cosine" and epochs > 0:
        return lr * 0.5 * (1.0 + math.cos(math.pi * min(epoch, epochs) / epochs))
    if schedule == "decay":
        warm = min(1.0, (epoch + 1) / DECAY_WARMUP) if DECAY_WARMUP > 0 else 1.0
        return warm * lr * 0.5 ** (epoch / DECAY_HALF_LIFE)
    return lr
