"""TrainConfig.label_smoothing reaches the heads' loss (vfl_core.data.learning_task.head_loss)."""

from __future__ import annotations

import torch
from torch import nn

from vfl_core.data.learning_task import CLASSIFICATION, REGRESSION, head_loss


def test_given_smoothing_when_a_classification_loss_is_built_then_targets_are_smoothed() -> None:
    out, y = torch.randn(8, 3), torch.randint(0, 3, (8,))
    smoothed = head_loss(CLASSIFICATION, 0.1)(out, y)
    assert torch.allclose(smoothed, nn.functional.cross_entropy(out, y, label_smoothing=0.1))
    assert not torch.allclose(smoothed, head_loss(CLASSIFICATION)(out, y))


def test_given_no_smoothing_or_regression_when_built_then_the_plain_loss() -> None:
    assert head_loss(CLASSIFICATION, 0.0) is nn.functional.cross_entropy
    assert head_loss(REGRESSION, 0.1) is nn.functional.mse_loss
