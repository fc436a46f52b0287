"""A feature-only party's tower trained without labels, before the federation (issue 44).

Under the `withhold` label defence a feature-only party never receives a label-derived gradient
and its tower takes no step in the federation, so the label party's heads learn on whatever
the tower computed at the start: its random initial weights, unless the party trains it on its
own rows first. `denoise` does that with the self-supervised pretext tasks of VIME (Yoon et al.,
NeurIPS 2020, Sec. 4.1): each entry of a row is, with probability `corruption`, replaced by the
same column of another row of the batch (a draw from the column's marginal, valid for numeric
and categorical codes alike; SCARF, Bahri et al., ICLR 2022, corrupts the same way); a decoder
on the tower's embedding reconstructs the row's numeric columns (standardised; the mean squared
error of vfl_core.methods.dvfl.nets, the project's one autoencoder loss) and tells which entries
were replaced (binary cross-entropy). `contrast` uses SCARF's objective instead (Bahri et al.,
ICLR 2022: InfoNCE between a projection of the clean row and of its corrupted view,
the other rows of the batch the negatives), `both` the sum of the two. The decoder and the
projection are dropped afterwards. Nothing about a label enters: the party's own features and
its own random stream only.
DEVIATIONS (docs/security.md): only the numeric columns are reconstructed (a categorical code's
value is a name), the two losses weigh the same (VIME weighs the reconstruction by a tuned
alpha), and one decoder serves both tasks; SCARF's anchor is the clean row's projection and
its corruption rate is the setting's (SCARF: 0.6).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from vfl_core.model.reconstruction import reconstruction_loss
from vfl_core.model.tower import MLPRepresentation, build_seeded
from vfl_core.seeding import Stream, derive_seed

log = logging.getLogger(__name__)

BATCH = 256
LEARNING_RATE = 1e-3
DECODER_HIDDEN = 128  # one hidden layer: the decoder only has to read the embedding


TEMPERATURE = 1.0  # the InfoNCE temperature SCARF trains with (Bahri et al. 2022)
PROJECTION = 128  # SCARF's pretraining head g: the loss is on its output, the tower keeps f


@dataclass(frozen=True)
class Pretrain:
    """What `pretrain_tower` does: `epochs` passes over the rows, `corruption` the chance that
    an entry is swapped with another row's; `objective` VIME's denoising (`denoise`), SCARF's
    contrastive loss (`contrast`) or their sum (`both`)."""

    epochs: int
    corruption: float
    objective: str = "denoise"


def corrupt(
    x: torch.Tensor, probability: float, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """`x` (B, F) with each entry, with `probability`, the same column of a random row of the
    batch (the column's empirical marginal); and the (B, F) float mask of the entries drawn."""
    mask = (torch.rand(x.shape, generator=generator) < probability).to(x.dtype)
    donors = torch.randint(0, x.shape[0], x.shape, generator=generator)  # a row per entry
    swapped = torch.gather(x, 0, donors)
    return x * (1 - mask) + swapped * mask, mask


def denoise_loss(
    decoded: torch.Tensor, clean: torch.Tensor, mask: torch.Tensor, dense: int
) -> torch.Tensor:
    """VIME's self-supervised loss: `decoded` (B, dense + F) holds the reconstruction of the
    first `dense` (standardised, numeric) columns of `clean` (B, F), then a logit per column
    of whether it was replaced (`mask`)."""
    recon = reconstruction_loss(decoded[:, :dense], clean[:, :dense]) if dense else 0.0
    bce = nn.functional.binary_cross_entropy_with_logits(decoded[:, dense:], mask)
    return recon + bce


def contrast_loss(anchor: torch.Tensor, positive: torch.Tensor) -> torch.Tensor:
    """SCARF's InfoNCE (Bahri et al. 2022): row i's projection `anchor[i]` (of the
    clean row) must be closer, in cosine, to `positive[i]` (its corrupted view) than to the
    other rows' corrupted views of the batch."""
    a = nn.functional.normalize(anchor, dim=1)
    p = nn.functional.normalize(positive, dim=1)
    logits = a @ p.T / TEMPERATURE
    return nn.functional.cross_entropy(logits, torch.arange(len(a), device=a.device))


def pretrain_tower(
    tower: nn.Module,
    features: np.ndarray,
    dense: int,
    plan: Pretrain,
    seed: int,
    block: int,
    device: torch.device,
) -> list[float]:
    """Train `tower` in place on `features` (N, *shape: the party's training rows, as its
    tower reads them; the first `dense` columns numeric) with the denoising objective; the
    mean loss of each epoch. Seeded by (`seed`, `block`) alone."""
    n = len(features)
    if n < 2 or plan.epochs == 0:
        return []
    flat = torch.from_numpy(np.ascontiguousarray(features.reshape(n, -1)))
    width = flat.shape[1]
    mean = flat[:, :dense].mean(dim=0)
    std = flat[:, :dense].std(dim=0).clamp_min(1e-6)  # the reconstruction in standard units
    shape = features.shape[1:]
    was = tower.training
    tower.train()
    with torch.no_grad():
        embed = tower(torch.from_numpy(features[:2]).to(device)).shape[-1]
    stream = derive_seed(seed, Stream.PRIVACY_PRETRAIN, block)
    decoder = build_seeded(
        stream,
        lambda: MLPRepresentation(embed, (DECODER_HIDDEN,), dense + width, final_activation=False),
    ).to(device)
    project = build_seeded(
        stream + 1,
        lambda: MLPRepresentation(embed, (PROJECTION,), PROJECTION, final_activation=False),
    ).to(device)
    heads = [*decoder.parameters(), *project.parameters()]
    opt = torch.optim.Adam([*tower.parameters(), *heads], lr=LEARNING_RATE)
    gen = torch.Generator().manual_seed(stream)
    losses: list[float] = []
    for _ in range(plan.epochs):
        order = torch.randperm(n, generator=gen)
        total = 0.0
        for start in range(0, n, BATCH):
            clean = flat[order[start : start + BATCH]]
            if len(clean) < 2:
                continue
            noisy, mask = corrupt(clean, plan.corruption, gen)
            target = clean.clone()
            target[:, :dense] = (clean[:, :dense] - mean) / std
            coded = tower(noisy.reshape(-1, *shape).to(device))
            loss = torch.zeros((), device=device)
            if plan.objective in ("denoise", "both"):
                decoded = decoder(coded)
                loss = loss + denoise_loss(
                    decoded, target.to(device).float(), mask.to(device).float(), dense
                )
            if plan.objective in ("contrast", "both"):
                anchor = tower(clean.reshape(-1, *shape).to(device))
                loss = loss + contrast_loss(project(anchor), project(coded))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(clean)
        losses.append(total / n)
    tower.train(was)
    log.info("block %d: tower pretrained, loss %.4f -> %.4f", block, losses[0], losses[-1])
    return losses
