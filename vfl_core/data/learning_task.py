"""What the federation learns: classification (integer labels) or regression (real targets).

The task decides the head's output width, the loss inside the LASER weighted sum and what a
head's prediction means. Regression targets are standardised with the label party's own
training mean and standard deviation (they never leave it): heads learn in standard units and
every prediction leaves the party in original units.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from vfl_core.errors import ConfigError

if TYPE_CHECKING:  # torch is imported where a loss or a tensor is used: the coordinator needs none
    import torch

Task = Literal["classification", "regression"]
TASKS: tuple[str, ...] = ("classification", "regression")
CLASSIFICATION: Task = "classification"
REGRESSION: Task = "regression"
# A head's loss: (output, target) -> the mean loss of the batch (a 0-d tensor).
LossFn = Callable[["torch.Tensor", "torch.Tensor"], "torch.Tensor"]


def head_loss(task: str, label_smoothing: float = 0.0) -> LossFn:
    """The per-task loss of one head output against the batch's targets (mean over the batch).

    Regression: MSE of the (B, 1) output against (B, 1) standardised targets. Every term of the
    LASER sum uses it with the same weights a_i, so the sampled loss stays unbiased.
    Classification: cross-entropy, with `label_smoothing` (TrainConfig.label_smoothing) of each
    target spread over the classes."""
    from torch import nn

    if task == REGRESSION:
        return nn.functional.mse_loss
    if label_smoothing:
        return functools.partial(nn.functional.cross_entropy, label_smoothing=label_smoothing)
    return nn.functional.cross_entropy


def output_width(task: str, num_classes: int) -> int:
    """Units of the head's last layer: one per class, or one real value."""
    return 1 if task == REGRESSION else num_classes


def is_binary(task: str, num_classes: int) -> bool:
    return task == CLASSIFICATION and num_classes == 2


# TrainConfig.target_transform "auto": a label party's regression target is learnt as log(1 + y)
# where its training targets are all >= 0 and their skewness exceeds this (a long right tail, as
# counts and prices have) and the log makes it smaller (docs/tabular-defaults.md, measured).
LOG_TARGET_SKEW = 1.0
TARGET_TRANSFORMS: tuple[str, ...] = ("none", "log", "auto")


def skewness(values: np.ndarray) -> float:
    """The sample skewness (third standardised moment) of `values`; 0 for a constant."""
    centred = values - values.mean()
    std = float(centred.std())
    return float((centred**3).mean() / std**3) if std > 0 else 0.0


def wants_log(labels: np.ndarray) -> bool:
    """The "auto" rule on a label party's training targets: non-negative, right-skewed by more
    than LOG_TARGET_SKEW, and less skewed after log(1 + y)."""
    values = labels.astype(np.float64)
    if len(values) == 0 or values.min() < 0:
        return False
    raw = skewness(values)
    return raw > LOG_TARGET_SKEW and abs(skewness(np.log1p(values))) < raw


@dataclass(frozen=True)
class TargetScaler:
    """Standardisation of regression targets with training statistics (constant: std 1), of
    log(1 + y) where `log` (TrainConfig.target_transform): heads then learn the standardised
    log and predictions leave as exp(.) - 1, in original units."""

    mean: float = 0.0
    std: float = 1.0
    log: bool = False

    @classmethod
    def fit(cls, labels: np.ndarray | None, transform: str = "none") -> TargetScaler:
        if labels is None or len(labels) == 0:
            return cls()
        values = labels.astype(np.float64)
        log = transform == "log" or (transform == "auto" and wants_log(values))
        if log:
            if values.min() <= -1:
                raise ConfigError(
                    f"target_transform log: a training target is {values.min():g}; "
                    "log(1 + y) needs every target above -1"
                )
            values = np.log1p(values)
        std = float(values.std())
        return cls(float(values.mean()), std if std > 0 else 1.0, log)

    def standardize(self, y: torch.Tensor) -> torch.Tensor:
        import torch

        return ((torch.log1p(y) if self.log else y) - self.mean) / self.std

    def restore(self, z: torch.Tensor) -> torch.Tensor:
        import torch

        value = z * self.std + self.mean
        return torch.expm1(value) if self.log else value
