"""Label-leak defences, opt-in, each applied by the party that owns what it protects (issue 32).

At the label party, before the gradients for another party's embedding leave it:
- `max_norm`: Li et al., ICLR 2022 ("Label Leakage and Protection in Two-party Split Learning"),
  Sec. 5's max-norm heuristic: each sample's gradient g_i gets isotropic Gaussian noise whose
  expected squared norm tops it up to the batch's largest, ||g_max||^2 - ||g_i||^2, so that the
  norm no longer ranks the classes.
- `direction_noise`: Marvell-style (same paper, Sec. 4). Marvell solves, per batch, for the two
  class-conditional noise covariances that minimise the leak bound under a noise power budget;
  the optimum puts the noise along the difference of the class means. We add noise along that
  direction only, with a variance `power` times the squared distance of the class means, to every
  sample alike. DEVIATION: not Marvell's optimised covariances; named so in docs/security.md and
  measured in benchmarks/results/privacy.md.
- `row_noise`: the standard normal draws of one row, the same in every epoch (seeded by the
  row), for `max_norm` and `direction_noise`. Fresh noise every round averages out when a
  feature-only party sums a row's gradients over the epochs (the norm of the summed unit
  gradients ranked Credit's labels at AUC 0.80-0.92 under the fresh-noise defence, issue 44);
  a row's own draw adds up with its signal instead.
At every party, before its embeddings leave it:
- `clip_and_noise`: each sample's embedding clipped to L2 norm `clip`, then Gaussian noise of
  standard deviation `noise_multiplier * clip` (the Gaussian mechanism of DP-SGD, Abadi et al.
  2016, applied to the released embedding); `epsilon` accounts it with opacus's RDP accountant.
At the label party, on its training labels once, before training:
- `randomized_response`: label DP by k-ary randomised response (Warner 1965): the true label kept
  with probability e^eps / (e^eps + k - 1), else one of the k - 1 others uniformly.
"""

from __future__ import annotations

import math

import numpy as np
import torch

# Rényi orders over which the accountant takes the best bound (opacus's default grid).
RDP_ORDERS = tuple([1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)))


def max_norm(
    grads: torch.Tensor,
    generator: torch.Generator | None = None,
    noise: torch.Tensor | None = None,
    floor: float = 0.0,
) -> torch.Tensor:
    """`grads` (B, d) with noise topping each row's expected squared norm up to the batch max
    times sqrt(1 + `floor`^2) (so that even the largest row gets noise of `floor` times its
    norm). `noise`: the standard normal (B, d) draws to scale (per-row defences pass each row's
    own, the same every epoch); None draws them from `generator`."""
    sq = grads.pow(2).sum(dim=1, keepdim=True)
    var = ((1 + floor**2) * sq.max() - sq).clamp_min(0) / grads.shape[1]
    if noise is None:
        noise = torch.randn(
            grads.shape, generator=generator, dtype=grads.dtype, device=grads.device
        )
    return grads + noise.to(grads.dtype) * var.sqrt()


def direction_noise(
    grads: torch.Tensor,
    labels: torch.Tensor,
    power: float,
    generator: torch.Generator | None = None,
    z: torch.Tensor | None = None,
) -> torch.Tensor:
    """`grads` (B, d) plus noise along the difference of the class means (binary labels 0/1),
    of variance `power` * ||mean_1 - mean_0||^2; unchanged when a class is absent. `z`: the
    standard normal (B, 1) multipliers (per-row defences pass each row's own); None draws them
    from `generator`."""
    positive = labels == 1
    if power <= 0 or positive.all() or not positive.any():
        return grads
    delta = grads[positive].mean(dim=0) - grads[~positive].mean(dim=0)
    size = delta.norm()
    if size == 0:
        return grads
    if z is None:
        z = torch.randn(
            (grads.shape[0], 1), generator=generator, dtype=grads.dtype, device=grads.device
        )
    return (
        grads + z.to(grads.dtype) * math.sqrt(power) * delta
    )  # std sqrt(power) * |delta| along delta


def row_noise(seed: int, rows: np.ndarray, width: int) -> torch.Tensor:
    """(B, width + 1) standard normal draws, row r's from a generator seeded by (`seed`, r):
    the same whatever batch, epoch or order r comes in. Columns :width feed `max_norm`, the
    last one `direction_noise`."""
    out = np.empty((len(rows), width + 1))
    for i, r in enumerate(rows.tolist()):
        out[i] = np.random.default_rng([seed & 0xFFFFFFFF, seed >> 32, int(r)]).standard_normal(
            width + 1
        )
    return torch.from_numpy(out)


def clip_and_noise(
    embeddings: torch.Tensor,
    clip: float,
    noise_multiplier: float,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Each row clipped to L2 norm `clip`, then N(0, (noise_multiplier * clip)^2) per entry."""
    norms = embeddings.norm(dim=1, keepdim=True)
    clipped = embeddings * (clip / norms.clamp_min(1e-12)).clamp(max=1.0)
    if noise_multiplier <= 0:
        return clipped
    noise = torch.randn(
        embeddings.shape, generator=generator, dtype=embeddings.dtype, device=embeddings.device
    )
    return clipped + noise * (noise_multiplier * clip)


def epsilon(noise_multiplier: float, sample_rate: float, steps: int, delta: float) -> float:
    """(epsilon, delta)-DP of `steps` releases, each of a Poisson-sampled fraction `sample_rate`
    of the rows through the Gaussian mechanism of `noise_multiplier` (Mironov et al. 2019, as
    opacus computes it). Batches here are shuffled, not Poisson-sampled: a common approximation
    of DP-SGD accounting, said in docs/security.md. inf without noise."""
    if noise_multiplier <= 0:
        return math.inf
    from opacus.accountants.analysis.rdp import compute_rdp, get_privacy_spent

    rdp = compute_rdp(
        q=sample_rate, noise_multiplier=noise_multiplier, steps=steps, orders=RDP_ORDERS
    )
    eps, _order = get_privacy_spent(orders=RDP_ORDERS, rdp=rdp, delta=delta)
    return float(eps)


def randomized_response(
    labels: np.ndarray, eps: float, num_classes: int, rng: np.random.Generator
) -> np.ndarray:
    """k-ary randomised response: each label kept with probability e^eps / (e^eps + k - 1),
    else replaced by one of the other k - 1 classes uniformly. eps-label-DP. Negative labels
    (unlabelled rows) stay as they are."""
    k = num_classes
    keep = math.exp(eps) / (math.exp(eps) + k - 1)
    out = labels.copy()
    known = labels >= 0
    flip = known & (rng.random(len(labels)) >= keep)
    shift = rng.integers(1, k, size=len(labels))  # 1..k-1: a class other than the true one
    out[flip] = (labels[flip] + shift[flip]) % k
    return out
