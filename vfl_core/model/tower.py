"""The normalisation a tabular party's MLP may put after each hidden Linear (ModelConfig.norm;
docs/tabular-defaults.md has what each measured)."""

from __future__ import annotations

import torch
from torch import nn

from vfl_core.errors import ConfigError


class RowSafeBatchNorm(nn.BatchNorm1d):
    """BatchNorm1d that normalises a training batch of one row by its running statistics
    instead of refusing it: a party may hold a single row of a round's batch."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and x.shape[0] == 1:
            return nn.functional.batch_norm(
                x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps
            )
        return super().forward(x)  # (B, width)


def norm_layers(kind: str, width: int) -> list[nn.Module]:
    """The layers of `kind` ("none", "layer" or "batch") for a hidden layer of `width`."""
    if kind == "none":
        return []
    if kind not in ("layer", "batch"):
        raise ConfigError(f"unknown model.norm {kind!r}; expected none, layer or batch")
    return [nn.LayerNorm(width) if kind == "layer" else RowSafeBatchNorm(width)]
