"""The central MLP in the federation's shape, an ablation of the generated tables' gap (issue 27):
one representation model per party on its own columns, fused as LASER-VFL fuses them (the mean of
the present parties' embeddings) or as the split-learning baselines do (their concatenation,
zeros for a missing party), and one head; trained centrally on the joined rows
(benchmarks.tabular_baselines.central_row, `Fit.towers`). What it leaves out of the federation:
LASER-VFL's subset objective (unless `Fit.drop` drops present feature parties at random while
training), the validation threshold and the subset choice.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from benchmarks.tabular_data import Prepared, party_block
from benchmarks.tabular_tables import LABEL_BLOCK
from vfl_core.config import TrainConfig
from vfl_core.model.models import build_head, build_representation, build_seeded

FUSIONS = ("mean", "concat")


class Towers(nn.Module):
    """Per-party towers, fused, then a head. Input: the parties' blocks side by side, then K
    presence flags (1: the party holds the row)."""

    def __init__(
        self, towers: list[nn.Module], widths: list[int], head: nn.Module, fusion: str, drop: float
    ) -> None:
        super().__init__()
        if fusion not in FUSIONS:
            raise ValueError(f"fusion must be one of {FUSIONS}, got {fusion!r}")
        self.towers = nn.ModuleList(towers)
        self.widths = widths
        self.head = head
        self.fusion = fusion
        self.drop = drop

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts, start = [], 0
        for tower, width in zip(self.towers, self.widths, strict=True):
            parts.append(tower(x[:, start : start + width]))  # (B, d)
            start += width
        present = x[:, start:]  # (B, K)
        if self.training and self.drop:
            # LASER-VFL trains the head on subsets of the present blocks; here each present
            # feature-only block is dropped with probability `drop` (the label party's stays)
            keep = (torch.rand_like(present) >= self.drop).float()
            keep[:, LABEL_BLOCK] = 1.0
            present = present * keep
        z = torch.stack(parts, dim=1) * present[:, :, None]  # (B, K, d)
        if self.fusion == "mean":
            fused = z.sum(dim=1) / present.sum(dim=1, keepdim=True).clamp(min=1.0)  # (B, d)
        else:
            fused = z.flatten(1)  # (B, K * d)
        return self.head(fused)


def towers_features(prep: Prepared, rows: np.ndarray) -> np.ndarray:
    """The parties' own blocks of `rows` side by side (zeros where a party misses a row), then
    the K presence flags."""
    blocks = [party_block(prep, k, rows) for k in range(len(prep.parties))]
    held = prep.split.held[:, rows].T.astype(np.float32)  # (n, K)
    return np.concatenate([*blocks, held], axis=1)


def towers_model(
    prep: Prepared, train: TrainConfig, outputs: int, fusion: str, drop: float, head_layers: int = 1
) -> Towers:
    """The federation's representation models (one per party, seeded seed + k) and its head on
    the fused embedding (K embeddings wide when concatenated)."""
    towers, widths = [], []
    for k, party in enumerate(prep.parties):
        width = party.meta.feature_shape[0]
        cards = tuple(party.meta.categorical)
        seed = train.seed + k
        towers.append(build_representation(train.model, (width,), seed, categorical=cards))
        widths.append(width)
    blocks = len(towers) if fusion == "concat" else 1
    seed = train.seed + len(towers)
    if head_layers > 1:  # a deeper MLP head than the federation's (the screen's candidate)
        head = build_seeded(seed, lambda: _deep_head(train, blocks, outputs, head_layers))
    else:
        head = build_head(train.model, outputs, seed, in_blocks=blocks, tabular=True)
    return Towers(towers, widths, head, fusion, drop)


def _deep_head(train: TrainConfig, blocks: int, outputs: int, layers: int) -> nn.Module:
    """`layers` hidden layers of the head's width, ReLU after each, then the logits."""
    width, parts = blocks * train.model.embed_dim, []
    for _ in range(layers):
        parts += [nn.Linear(width, train.model.head_hidden), nn.ReLU()]
        width = train.model.head_hidden
    return nn.Sequential(*parts, nn.Linear(width, outputs))
