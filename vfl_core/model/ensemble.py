"""Tabular towers with numeric embeddings and efficient ensembles, and the ensemble's heads.

The ensemble is TabM-mini (Gorishniy et al., "TabM: Advancing Tabular Deep Learning with
Parameter-Efficient Ensembling", ICLR 2025, s. 3.3 "TabM-mini"): k members share the party's MLP;
member j multiplies the MLP's input by its own vector r_j (initialised with random signs, the
paper's choice for the one non-shared adapter) and has its own output layer in the head. The k
members' embeddings travel side by side in the party's one embedding of `embed_dim` values
(member j's are values j*d/k .. (j+1)*d/k - 1), so the wire, the mean fusion and every subset
predictor of LASER-VFL are as without it: the mean over parties of member j's values is member
j's fused embedding. Training: each member's loss, averaged over the members (the paper's s. 3.1:
members are trained as k models, not as one mean prediction); a head in train mode returns its k
outputs (B, k, C) and `member_loss` scores each. Evaluation, prediction and serving bundles (heads
in eval mode): the mean of the members' probabilities (classification, returned as its log, so
that a softmax gives it back) or of their values (regression).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from vfl_core.errors import ConfigError
from vfl_core.model.num_embeddings import NumericEmbedding

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def member_width(embed_dim: int, k: int) -> int:
    """Each member's share of the embedding; `embed_dim` must split into k equal parts."""
    if embed_dim % k:
        raise ConfigError(f"--ensemble {k} needs an --embed-dim divisible by it, got {embed_dim}")
    return embed_dim // k


class EnsembleTower(nn.Module):
    """A tabular party's representation model with numeric embeddings (`numeric`), categorical
    embeddings (`cardinalities`, the code columns ending each row) and k members (`k`):
    (B, F) -> (B, embed_dim). `mlp` maps a member's input row to its embed_dim / k values."""

    def __init__(
        self,
        dense_width: int,
        numeric: NumericEmbedding | None,
        cardinalities: tuple[int, ...],
        embedding_dims: tuple[int, ...],
        k: int,
        mlp_factory: Callable[[int], nn.Module],
    ) -> None:
        super().__init__()
        self.codes = len(cardinalities)
        self.cardinalities = cardinalities
        self.numeric = numeric
        self.embeddings = nn.ModuleList(
            nn.Embedding(n, d) for n, d in zip(cardinalities, embedding_dims, strict=True)
        )
        width = (dense_width if numeric is None else numeric.out_width) + sum(embedding_dims)
        self.k = k
        # random signs: the members see the same row differently from the first step on
        signs = torch.randint(0, 2, (k, width)).float() * 2 - 1
        self.adapter = nn.Parameter(signs) if k > 1 else None
        self.mlp = mlp_factory(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        width = x.shape[1] - self.codes
        dense, codes = x[:, :width], x[:, width:].round().long()  # (B, F_dense), (B, codes)
        parts = [dense if self.numeric is None else self.numeric(dense)]
        for i, embedding in enumerate(self.embeddings):
            parts.append(embedding(codes[:, i].clamp(0, self.cardinalities[i] - 1)))
        h = torch.cat(parts, dim=1)  # (B, W)
        if self.adapter is None:
            return self.mlp(h)  # (B, embed_dim)
        h = (h[:, None, :] * self.adapter).flatten(0, 1)  # (B * k, W)
        return self.mlp(h).unflatten(0, (-1, self.k)).flatten(1)  # (B, k * embed_dim / k)


class EnsembleHead(nn.Module):
    """k heads on the members' fused embeddings: (B, in_blocks * embed_dim) -> (B, k, C) in
    train mode, (B, C) in eval mode (the members' mean; see the module docstring). "mlp": a
    shared Linear(in, hidden) and ReLU, then a Linear of each member's own; "linear": each
    member's own Linear."""

    def __init__(
        self, k: int, in_blocks: int, member: int, hidden: int | None, outputs: int
    ) -> None:
        super().__init__()
        self.k, self.in_blocks, self.member = k, in_blocks, member
        self.regression = outputs == 1
        width = in_blocks * member
        self.body = nn.Sequential(nn.Linear(width, hidden), nn.ReLU()) if hidden else None
        last = hidden or width
        bound = 1 / last**0.5  # nn.Linear's initialisation, per member
        self.weight = nn.Parameter(torch.empty(k, last, outputs).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(k, outputs).uniform_(-bound, bound))

    def members(self, z: torch.Tensor) -> torch.Tensor:
        """(B, in_blocks * embed_dim) -> (B, k, C), each member's output."""
        z = z.reshape(-1, self.in_blocks, self.k, self.member).transpose(1, 2)
        z = z.flatten(2)  # (B, k, in_blocks * d / k): member j's values of every block
        if self.body is not None:
            z = self.body(z)  # (B, k, hidden)
        return torch.einsum("bkh,khc->bkc", z, self.weight) + self.bias

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        out = self.members(z)  # (B, k, C)
        if self.training:
            return out
        if self.regression:
            return out.mean(dim=1)  # (B, 1)
        probs = torch.softmax(out, dim=2).mean(dim=1)  # (B, C)
        return torch.log(probs.clamp_min(1e-30))  # logits whose softmax is the mean


def member_loss(loss_fn: LossFn) -> LossFn:
    """`loss_fn` for heads that may return k members' outputs (B, k, C): the mean of each
    member's loss (the mean over B * k rows: equal batches). (B, C) outputs: `loss_fn` itself."""

    def loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if output.dim() != 3:
            return loss_fn(output, target)
        k = output.shape[1]
        return loss_fn(output.flatten(0, 1), target.repeat_interleave(k, dim=0))

    return loss
