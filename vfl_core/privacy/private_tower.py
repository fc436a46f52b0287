"""A feature-only party's tower as a fixed orthogonal map drawn from a seed only it knows.

Under the `withhold` label defence a feature-only party's tower never moves, so what it sends is
a fixed function of its rows that no label shaped. With `feature_tower: orthogonal` that
function is affine and loses nothing: each column of the party's prepared block x (F values a
row) is standardised with the party's own training rows' mean and standard deviation (a
constant column only centred), z = (x - mean) / std, then rotated by an orthogonal F x F matrix
Q (QR of a Gaussian matrix, the signs of R's diagonal moved into Q, so Q is uniform over the
orthogonal group) and zero-padded to the run's embedding width: the embedding is W z with
W = [Q; 0], whose columns are orthonormal (W^T W = I).

Why this shape: a classifier that depends on its inputs only through inner products and norms
(an L2-regularised logistic regression, a k-NN in Euclidean distance) scores W z exactly as it
scores z, so the tower adds nothing to what the party could fit on its standardised columns with
a few labels (model completion, Fu et al., USENIX Security 2022, gains nothing by
construction). A classifier that standardises each input coordinate first (the meter's) is not
rotation-invariant; standardising the columns before the rotation, and keeping the block in F
coordinates rather than spreading it over all `embed_dim` (each coordinate would then hold
about F / embed_dim of a column's variance, a weaker penalty in effect), leaves it fitting
nearly what it fits on the raw columns: the 40-row gains the meter measures are its sampling
spread around zero (benchmarks/results/privacy_ortho.md).

The seed: `tower_seed`, a setting of the party alone (vfl-client --private-tower-seed), never
sent anywhere; the map is in the party's checkpoints and serving bundle, not in any message.
Without it the map comes from the federation's seed, which every party knows: the label party
could then rebuild W and read x = W^T (W x) back exactly (benchmarks/results/privacy_ortho.md
measures both).
"""

from __future__ import annotations

import logging
import math

import numpy as np
import torch
from torch import nn

from vfl_core.errors import ConfigError
from vfl_core.seeding import Stream, derive_seed

log = logging.getLogger(__name__)


def orthogonal_map(width: int, embed_dim: int, seed: int, block: int) -> torch.Tensor:
    """W (embed_dim, width): an orthogonal width x width matrix drawn from (`seed`, `block`),
    then `embed_dim - width` rows of zeros."""
    if width > embed_dim:
        raise ConfigError(
            f"--privacy-feature-tower orthogonal: party {block}'s block is {width} values wide, "
            f"wider than --embed-dim {embed_dim} (the map keeps every column: raise --embed-dim)"
        )
    generator = torch.Generator().manual_seed(derive_seed(seed, Stream.PRIVACY_TOWER, block))
    gaussian = torch.randn(width, width, generator=generator, dtype=torch.float64)
    q, r = torch.linalg.qr(gaussian)
    q = q * torch.sign(torch.diagonal(r))  # Haar-uniform (Mezzadri 2007), not QR's bias
    padded = torch.zeros(embed_dim, width, dtype=torch.float64)
    padded[:width] = q
    return padded.to(torch.float32)


def standardisation(rows: np.ndarray | None, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each column's mean and standard deviation over `rows` (a constant column's scale 1; no
    rows: 0 and 1, the state a checkpoint then replaces)."""
    if rows is None or not len(rows):
        return torch.zeros(width), torch.ones(width)
    flat = rows.reshape(len(rows), -1).astype(np.float64)
    std = flat.std(axis=0)
    std[std == 0] = 1.0
    return torch.from_numpy(flat.mean(axis=0)).float(), torch.from_numpy(std).float()


class OrthogonalTower(nn.Module):
    """(B, *feature_shape) -> (B, embed_dim): the flattened row standardised, times W^T. W, the
    mean and the scale are parameters that take no gradient (kept in state dicts, checkpoints
    and serving bundles)."""

    def __init__(self, weight: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)
        self.mean = nn.Parameter(mean, requires_grad=False)
        self.std = nn.Parameter(std, requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ((x.flatten(1) - self.mean) / self.std) @ self.weight.T


def fixed_tower(
    kind: str,
    feature_shape: tuple[int, ...],
    embed_dim: int,
    federation_seed: int,
    block: int,
    tower_seed: int | None,
    rows: np.ndarray | None = None,
) -> OrthogonalTower | None:
    """A feature-only party's fixed tower under `feature_tower` `kind` ("model": none, the run's
    own architecture is built), from its private `tower_seed` (None: from the federation's seed,
    with a warning that the label party can rebuild it), standardising with its training
    `rows`."""
    if kind == "model":
        return None
    if tower_seed is None:
        log.warning(
            "party %d: no private tower seed, its orthogonal tower is drawn from the federation's "
            "seed (every party can rebuild it and read the block back): give --private-tower-seed",
            block,
        )
        seed = federation_seed
    elif tower_seed == federation_seed:
        raise ConfigError(
            f"party {block}: --private-tower-seed is the run's --seed, which every party knows"
        )
    else:
        seed = tower_seed
    width = math.prod(feature_shape)
    weight = orthogonal_map(width, embed_dim, seed, block)
    return OrthogonalTower(weight, *standardisation(rows, width))
