"""A linear model of the joined columns beside the towers (ModelConfig.linear_lane).

With `linear_lane` L > 0, the last L of a tabular party's `embed_dim` values are a linear map of
its own row (`LaneTower`): of the dense values, and of each code column through an embedding of
width L (a linear map of its one-hot coding); the party's MLP fills the other embed_dim - L.
The wire, the mean fusion and every subset predictor are as without it: the lane is part of the
embedding.

A label party then trains one more head (`LinearHead`, key LINEAR_HEAD) on the zero-filled
concatenation of the present blocks' embeddings: the sum over blocks of their lanes, then a
Linear(L, C). Its logits are a linear function of every present party's columns (a missing block
adds 0, the mean of its standardised columns): logistic or ridge regression of the joined columns,
trained through the federation's rounds. The other heads read the lanes too but send no gradient
into them (`detach_lane`), so each lane learns from the linear head's loss alone. The validation
choice may then predict every observed set holding a label party with it
(vfl_core.inference.choice.choose_heads_pooled): a table whose best model is linear gets one.

The lanes start at zero: the linear head's first logits are its bias, as a logistic regression
fitted from zero starts.
"""

from __future__ import annotations

import torch
from torch import nn

from vfl_core.errors import ConfigError
from vfl_core.model.model_config import ModelConfig
from vfl_core.model.tower import build_seeded

# The linear head's logits are this times its Linear's: under Adam a weight moves by about the
# learning rate a step, so a linear model started at zero reaches coefficients of a few units
# only after hundreds of rounds at the tables' rate; x10 reaches them in the tens of rounds a
# table trains (on gen_highcard and census_like, the head's validation Brier score at x1, x10,
# x30: benchmarks/results/tabular.md).
LANE_SCALE = 10.0


def check_lane(config: ModelConfig, tabular: bool) -> None:
    """Refuse a lane the towers cannot carry, naming why."""
    lane = config.linear_lane
    if not lane:
        return
    if not tabular:
        raise ConfigError("--linear-lane needs tabular parties (an mlp representation)")
    if lane >= config.embed_dim:
        raise ConfigError(
            f"--linear-lane {lane} must be below --embed-dim {config.embed_dim}: the lane is "
            f"the last {lane} of each embedding's values"
        )
    if config.ensemble > 1 or config.num_embedding != "none" or config.head == "wide":
        raise ConfigError(
            "--linear-lane needs --ensemble 1, --num-embedding none and a head other than wide"
        )


class LaneTower(nn.Module):
    """(B, F) -> (B, embed_dim): `tower`'s embed_dim - L values, then the L of the lane. The
    last `len(cardinalities)` values of a row are category codes (0: unknown)."""

    def __init__(self, tower: nn.Module, width: int, cardinalities: tuple[int, ...], lane: int):
        super().__init__()
        self.tower = tower
        self.cardinalities = tuple(cardinalities)
        self.dense_width = width - len(cardinalities)
        self.dense = nn.Linear(self.dense_width, lane, bias=False)
        self.codes = nn.ModuleList(nn.Embedding(n, lane) for n in cardinalities)
        for weight in (self.dense.weight, *(e.weight for e in self.codes)):
            nn.init.zeros_(weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lane = self.dense(x[:, : self.dense_width])  # (B, L)
        codes = x[:, self.dense_width :].round().long()
        for i, embedding in enumerate(self.codes):
            lane = lane + embedding(codes[:, i].clamp(0, self.cardinalities[i] - 1))
        return torch.cat([self.tower(x), lane], dim=1)  # (B, embed_dim)


class LinearHead(nn.Module):
    """(B, in_blocks * embed_dim) zero-filled concatenation -> (B, C): the sum of the blocks'
    lanes through one Linear(L, C)."""

    def __init__(self, in_blocks: int, embed_dim: int, lane: int, outputs: int) -> None:
        super().__init__()
        self.in_blocks, self.embed_dim, self.lane = in_blocks, embed_dim, lane
        self.linear = nn.Linear(lane, outputs)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        z = z.reshape(-1, self.in_blocks, self.embed_dim)[:, :, self.embed_dim - self.lane :]
        return LANE_SCALE * self.linear(z.sum(dim=1))  # (B, C)


def build_linear_head(config: ModelConfig, outputs: int, seed: int, in_blocks: int) -> nn.Module:
    """The linear head of a label party whose towers carry lanes."""
    if not config.linear_lane:
        raise ConfigError("the linear head needs --linear-lane above 0")
    return build_seeded(
        seed, lambda: LinearHead(in_blocks, config.embed_dim, config.linear_lane, outputs)
    )


def detach_lane(embedding: torch.Tensor, lane: int) -> torch.Tensor:
    """`embedding` (B, embed_dim) whose last `lane` values pass no gradient back: a head other
    than the linear one reads the lane but does not train it."""
    if not lane:
        return embedding
    cut = embedding.shape[1] - lane
    return torch.cat([embedding[:, :cut], embedding[:, cut:].detach()], dim=1)
