"""The layers a tabular party's MLP may put after each hidden Linear: a normalisation
(ModelConfig.norm; docs/tabular-defaults.md has what each measured) and a seeded dropout
(ModelConfig.dropout)."""

from __future__ import annotations

import torch
from torch import nn

from vfl_core.errors import ConfigError
from vfl_core.seeding import Stream, derive_seed


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


class SeededDropout(nn.Dropout):
    """nn.Dropout whose masks come from its own seed and a count of the masks drawn, not from
    torch's global generator: a run's masks are then fixed by its seed alone, whatever else ran
    in the process before (with several parties, or runs, in one process), the same in process
    and over gRPC, and the same after a resume (the count is in the state dict)."""

    def __init__(self, p: float, seed: int, layer: int = 0) -> None:
        super().__init__(p)
        self.seed, self.layer = seed, layer
        self.draws = 0  # masks drawn so far, in training

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        generator = torch.Generator(device=x.device)
        generator.manual_seed(derive_seed(self.seed, Stream.TOWER_DROPOUT, self.layer, self.draws))
        self.draws += 1
        draws = torch.rand(x.shape, generator=generator, device=x.device, dtype=x.dtype)
        return x * (draws >= self.p) / (1.0 - self.p)  # nn.Dropout's scaling of what is kept

    def get_extra_state(self) -> dict:
        return {"draws": self.draws}

    def set_extra_state(self, state: dict) -> None:
        self.draws = int(state["draws"])

    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args: object) -> None:
        # a state saved before the masks were seeded has no count: start it at 0 (strict loads
        # would otherwise refuse every such checkpoint and serving bundle)
        state_dict.setdefault(prefix + "_extra_state", {"draws": 0})
        super()._load_from_state_dict(state_dict, prefix, *args)
