"""Embeddings of a tabular party's numeric columns inside its representation model (Gorishniy et
al. 2022, "On Embeddings for Numerical Features in Tabular Deep Learning", NeurIPS): each numeric
column's standardised value becomes a vector of `dim` values before the party's MLP.

- "ple": piecewise-linear encoding with quantile bins (the paper's s. 3.2, eq. 1-2, "Q"), then a
  Linear and a ReLU per column ("Q-LR", s. 3.4). The bin edges are quantiles of the party's own
  TRAINING rows (`fit_numeric`), kept as buffers of the module: they travel with its weights into
  checkpoints and serving bundles, so an online prediction uses the edges training used.
- "periodic": cos and sin of 2 pi c x with trainable frequencies c ~ N(0, sigma) (s. 3.3, eq. 3),
  then a Linear and a ReLU per column ("PLR", s. 3.4).

Which columns are numeric is read from the training rows, not the preprocessing: a dense column
with more than two distinct training values (a standardised number; one-hot and missingness
flags take two), so a party prepared with `vfl prepare` (no preprocessing of its own) gets the
same embeddings. Code columns (categorical embeddings) are never among them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

# rows the quantiles are read from at most: evenly spaced training rows beyond this (the edges
# of a million rows' quantiles move by less than a bin's width; fitting stays a pass of numpy)
FIT_MAX_ROWS = 200_000
# rtdl_num_embeddings' defaults for the periodic embedding: 0.01 x N(0, 1) frequencies; fewer
# of them (16, not 48) keeps a round's cost near the plain MLP's on the benchmark tables
PERIODIC_SIGMA = 0.01
PERIODIC_FREQUENCIES = 16


@dataclass(frozen=True)
class NumericFit:
    """What a party's numeric embedding is built from: the dense columns it embeds and, for
    "ple", each one's bin edges (standardised units; padded with the last edge)."""

    kind: str  # "ple" or "periodic"
    columns: tuple[int, ...]  # indices into the dense part of a row, ascending
    edges: tuple[tuple[float, ...], ...]  # per column (ple), distinct and ascending
    dense_width: int  # values per row before the code columns


def fit_numeric(kind: str, dense: np.ndarray, bins: int) -> NumericFit:
    """The numeric columns of `dense` (training rows, (n, F_dense)) and their quantile edges
    (up to `bins` bins each, fewer where values repeat)."""
    step = max(1, math.ceil(len(dense) / FIT_MAX_ROWS))
    rows = np.asarray(dense[::step], dtype=np.float64)  # (n', F_dense)
    columns, edges = [], []
    for j in range(rows.shape[1]):
        values = rows[:, j][np.isfinite(rows[:, j])]
        if len(np.unique(values)) <= 2:
            continue  # a flag or a one-hot value: nothing to embed
        columns.append(j)
        cut = np.unique(np.quantile(values, np.linspace(0, 1, bins + 1)))
        edges.append(tuple(float(e) for e in cut) if kind == "ple" else ())
    return NumericFit(kind, tuple(columns), tuple(edges), rows.shape[1])


class NumericEmbedding(nn.Module):
    """(B, F_dense) -> (B, F_dense - n + n * dim): the n numeric columns replaced by their
    embeddings (after the columns kept as they are)."""

    def __init__(self, fit: NumericFit, dim: int, bins: int) -> None:
        super().__init__()
        n = len(fit.columns)
        kept = [j for j in range(fit.dense_width) if j not in set(fit.columns)]
        self.register_buffer("embedded", torch.tensor(fit.columns, dtype=torch.long))
        self.register_buffer("kept", torch.tensor(kept, dtype=torch.long))
        self.kind, self.dim = fit.kind, dim
        if fit.kind == "ple":
            self._ple_buffers(fit, bins)
            width = bins
        else:
            self.frequencies = nn.Parameter(torch.randn(n, PERIODIC_FREQUENCIES) * PERIODIC_SIGMA)
            width = 2 * PERIODIC_FREQUENCIES
        # one Linear per column, as (n, width, dim) weights: nn.Linear's initialisation per column
        bound = 1 / math.sqrt(width)
        self.weight = nn.Parameter(torch.empty(n, width, dim).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(n, dim).uniform_(-bound, bound))
        self.out_width = len(kept) + n * dim

    def _ple_buffers(self, fit: NumericFit, bins: int) -> None:
        n = len(fit.columns)
        lo, hi = torch.zeros(n, bins), torch.ones(n, bins)
        used = torch.zeros(n, bins, dtype=torch.bool)  # bins a column has (fewer if it repeats)
        last = torch.zeros(n, bins, dtype=torch.bool)  # each column's last bin: open above
        for i, e in enumerate(fit.edges):
            t = max(1, len(e) - 1)
            if len(e) >= 2:
                lo[i, :t] = torch.tensor(e[:-1])
                hi[i, :t] = torch.tensor(e[1:])
            used[i, :t], last[i, t - 1] = True, True
        self.register_buffer("lo", lo)
        self.register_buffer("hi", hi)
        self.register_buffer("used", used)
        self.register_buffer("last", last)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """(B, n) standardised values -> (B, n, width) encodings."""
        if self.kind == "periodic":
            angle = 2 * math.pi * self.frequencies[None] * x[..., None]  # (B, n, k)
            return torch.cat([torch.cos(angle), torch.sin(angle)], dim=-1)  # (B, n, 2k)
        v = (x[..., None] - self.lo) / (self.hi - self.lo)  # (B, n, T)
        v = torch.where(self.last, v, v.clamp(max=1.0))  # the last bin open above
        first = torch.zeros_like(self.used)
        first[:, 0] = True
        v = torch.where(first, v, v.clamp(min=0.0))  # the first open below
        return v * self.used  # bins a column lacks stay 0

    def forward(self, dense: torch.Tensor) -> torch.Tensor:
        x = dense.index_select(1, self.embedded)  # (B, n)
        e = torch.einsum("bnw,nwd->bnd", self.encode(x), self.weight) + self.bias  # (B, n, d)
        e = torch.relu(e).flatten(1)  # (B, n * d)
        return torch.cat([dense.index_select(1, self.kept), e], dim=1)
