"""A linear model of the joined columns beside the towers (ModelConfig.linear_lane).

With `linear_lane` L > 0, a tabular party's embedding carries L more values after its
`embed_dim` (`LaneTower`): a linear map of its own row, of the dense values and of each code
column through an embedding of width L (a linear map of its one-hot coding). What travels is
`wire_width` = embed_dim + L values a sample.

A label party then trains one more head (`LinearHead`, key LINEAR_HEAD) on the zero-filled
concatenation of the present blocks' embeddings: the sum over blocks of their lanes, then a
Linear(L, C). Its logits are a linear function of every present party's columns (a missing block
adds 0, the mean of its standardised columns): logistic or ridge regression of the joined columns,
trained through the federation's rounds on its own loss term. Every other head reads the first
embed_dim values of each block only (`LaneBlind`): they, the towers' MLPs and everything they
predict are the same, bit for bit, as without the lanes. The validation choice may then predict
every observed set holding a label party with the linear heads
(vfl_core.inference.choice.choose_heads_pooled): a table whose best model is linear gets one.

The lanes and the linear head's bias start at zero: its first logits are 0, as a logistic or
ridge regression fitted from zero starts. Their optimisers penalise them by
TrainConfig.lane_weight_decay (`lane_parameters`), in place of the towers' weight decay: the
L2 penalty a logistic or ridge regression has.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from vfl_core.errors import ConfigError
from vfl_core.model.model_config import ModelConfig
from vfl_core.model.model_config import wire_width as wire_width
from vfl_core.model.tower import build_seeded

# The linear head's logits are this times its Linear's: under Adam a weight moves by about the
# learning rate a step, so a linear model started at zero reaches coefficients of a few units
# only after hundreds of rounds at the tables' rate; x10 reaches them in the tens of rounds a
# table trains (on gen_highcard and census_like, the head's validation Brier score at x1, x10,
# x30 and x100: benchmarks/results/tabular.md).
LANE_SCALE = 10.0


def check_lane(config: ModelConfig, tabular: bool) -> None:
    """Refuse a lane the towers cannot carry, naming why."""
    if not config.linear_lane:
        return
    if not tabular:
        raise ConfigError("--linear-lane needs tabular parties (an mlp representation)")
    if config.ensemble > 1 or config.num_embedding != "none" or config.head == "wide":
        raise ConfigError(
            "--linear-lane needs --ensemble 1, --num-embedding none and a head other than wide"
        )


class LaneTower(nn.Module):
    """(B, F) -> (B, embed_dim + L): `tower`'s embed_dim values, then the L of the lane. The
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
        # each code column's highest code (not saved: it is the cardinalities')
        top = torch.tensor([n - 1 for n in cardinalities], dtype=torch.long)
        self.register_buffer("top", top, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Every operation here runs on each tower call of a round, and on a table's small
        # tensors an operation's fixed cost is about its arithmetic's: none that a table
        # without code columns does not need, and one clamp for all code columns.
        if not self.cardinalities:
            return torch.cat([self.tower(x), self.dense(x)], dim=1)  # (B, embed_dim + L)
        lane = self.dense(x[:, : self.dense_width])  # (B, L)
        codes = torch.minimum(x[:, self.dense_width :].round().long().clamp(min=0), self.top)
        for i, embedding in enumerate(self.codes):
            lane = lane + embedding(codes[:, i])
        return torch.cat([self.tower(x), lane], dim=1)  # (B, embed_dim + L)


def lane_parameters(module: nn.Module) -> list[nn.Parameter]:
    """The linear model's weights within `module` (a tower or a head): its lanes' maps and
    embeddings, and the linear head's Linear; none elsewhere."""
    found: list[nn.Parameter] = []
    for sub in module.modules():
        if isinstance(sub, LaneTower):
            found += [*sub.dense.parameters(), *sub.codes.parameters()]
        elif isinstance(sub, LinearHead):
            found += list(sub.linear.parameters())
    return found


def lane_tower(
    tower: nn.Module, width: int, cardinalities: tuple[int, ...], lane: int, seed: int
) -> nn.Module:
    """`tower` with a lane of `lane` values (built apart from the caller's random state)."""
    return build_seeded(seed, lambda: LaneTower(tower, width, cardinalities, lane))


class LinearHead(nn.Module):
    """(B, in_blocks * (embed_dim + L)) zero-filled concatenation -> (B, C): the sum of the
    blocks' lanes through one Linear(L, C)."""

    def __init__(self, in_blocks: int, embed_dim: int, lane: int, outputs: int) -> None:
        super().__init__()
        self.in_blocks, self.embed_dim, self.lane = in_blocks, embed_dim, lane
        self.linear = nn.Linear(lane, outputs)
        # torch's default bias, up to 1 / sqrt(L) = 0.5, is up to 5 in the logits at LANE_SCALE:
        # a prediction 5 standard deviations off (regression) or at a probability of 0.99
        # (classification) that Adam walks back 0.05 a round, over the first hundred rounds of a
        # table's hundred or two. The weights stay random: the lanes, at zero, learn through them.
        nn.init.zeros_(self.linear.bias)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        z = z.reshape(-1, self.in_blocks, self.embed_dim + self.lane)[:, :, self.embed_dim :]
        return LANE_SCALE * self.linear(z.sum(dim=1))  # (B, C)


class LaneBlind(nn.Module):
    """`head` fed the first embed_dim values of each of `in_blocks` blocks: (B, in_blocks *
    (embed_dim + L)) -> its output. No gradient reaches a lane through it."""

    def __init__(self, head: nn.Module, in_blocks: int, embed_dim: int, lane: int) -> None:
        super().__init__()
        self.head = head
        self.in_blocks, self.embed_dim, self.lane = in_blocks, embed_dim, lane

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        if self.in_blocks == 1:  # a mean-fusion head: the first embed_dim columns, as a view
            return self.head(z[:, : self.embed_dim])
        z = z.reshape(-1, self.in_blocks, self.embed_dim + self.lane)[:, :, : self.embed_dim]
        return self.head(z.flatten(1))


def lane_heads(
    config: ModelConfig,
    linear: bool,
    outputs: int,
    seed: int,
    in_blocks: int,
    build: Callable[[], nn.Module],
) -> nn.Module:
    """A head where the towers carry lanes: the linear head (`linear`), else `build()`'s head,
    blind to the lanes (its weights those it has without them)."""
    lane = config.linear_lane
    if linear:
        if not lane:
            raise ConfigError("the linear head needs --linear-lane above 0")
        return build_seeded(seed, lambda: LinearHead(in_blocks, config.embed_dim, lane, outputs))
    head = build()
    return LaneBlind(head, in_blocks, config.embed_dim, lane) if lane else head
