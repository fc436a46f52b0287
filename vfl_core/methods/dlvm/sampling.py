"""The latent samples of a step, drawn alike by the coordinator and the active party, and the
array checks every DLVM message goes through (vfl_core.methods.dlvm.latent_math has the math).

The coordinator draws h from the posterior of the experts it relays, to send the decoders; the
active party redraws exactly the same h, with the graph to the experts, from the same seeded
noise. Both go through `posterior` here, so the two cannot disagree.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal

import numpy as np
import torch

from vfl_core.errors import ProtocolError
from vfl_core.methods.dlvm import latent_math as dm
from vfl_core.methods.dlvm.messages import Decoded, Stage
from vfl_core.seeding import Stream, derive_seed, rng

if TYPE_CHECKING:
    from vfl_core.methods.spec import RunConfig

Posterior = Literal["mean", "product"]  # DlvmConfig.posterior


def noise(seed: int, stage: int, round_id: int, shape: tuple[int, int], dims: tuple[int, int]):
    """The standard normal draws of h and z for one step: (B, S, d) and (B, S, dz). The same
    (seed, stage, round) gives the same draws in the coordinator and the active party.
    Inference draws the same noise at every request (`round_id` there is the request counter):
    a sample's predicted class is then the same each time it is asked for in the same batch
    position (an evaluation's batches are a fixed plan), not a new Monte Carlo estimate."""
    key = 0 if stage == Stage.PREDICT else round_id
    gen = torch.Generator().manual_seed(derive_seed(seed, Stream.DLVM_NOISE, stage, key))
    noise_h = torch.randn((*shape, dims[0]), generator=gen)
    noise_z = torch.randn((*shape, dims[1]), generator=gen)
    return noise_h, noise_z


def kept_experts(
    blocks: list[int], seed: int, stage: int, round_id: int, dropout: float
) -> list[int]:
    """The experts a step's posterior combines (DlvmConfig.expert_dropout): every one at
    inference or without dropout; else each stays with 1 - dropout, and at least the one whose
    draw was highest (the same draw in the coordinator and the active party)."""
    if dropout == 0.0 or stage == Stage.PREDICT or len(blocks) < 2:
        return blocks
    draws = rng(seed, Stream.DLVM_DROPOUT, stage, round_id).random(len(blocks))  # block order
    kept = [b for b, u in zip(blocks, draws, strict=True) if u >= dropout]
    return kept or [blocks[int(np.argmax(draws))]]


def posterior(
    experts: Mapping[int, torch.Tensor],
    noise_h: torch.Tensor,
    kept: list[int],
    kind: Posterior = "mean",
):
    """The posterior of the `kept` experts (B, 2d) each, in block order, and samples from it:
    (mean, logvar) (B, d) each, h (B, S, d). `kind` "mean" is the paper's Eq. (1), "product"
    the product of experts."""
    d = noise_h.shape[-1]
    parts = [experts[b] for b in kept]
    combine = dm.mean_of_experts if kind == "mean" else dm.product_of_experts
    mean, logvar = combine([e[:, :d] for e in parts], [e[:, d:] for e in parts])
    return mean, logvar, dm.reparameterise(mean, logvar, noise_h)


def latent_samples(
    experts: Mapping[int, np.ndarray],
    config: RunConfig,
    stage: int,
    round_id: int,
    samples: int,
) -> np.ndarray:
    """What the coordinator sends the decoders: S samples of h from the posterior of the
    received experts, (B, S, d) float32 (the active party redraws exactly these)."""
    tensors = {b: from_wire(e, e.shape, f"expert of block {b}") for b, e in experts.items()}
    cfg, seed = config.dlvm, config.seed
    batch = next(iter(tensors.values())).shape[0]
    noise_h, _ = noise(seed, stage, round_id, (batch, samples), (cfg.latent_dim, cfg.z_dim))
    kept = kept_experts(sorted(tensors), seed, stage, round_id, cfg.expert_dropout)
    with torch.no_grad():
        return to_wire(posterior(tensors, noise_h, kept, cfg.posterior)[2])


# ---------------------------------------------------------------- wire helpers


def to_wire(t: torch.Tensor) -> np.ndarray:
    return t.detach().to("cpu", torch.float32).numpy().copy()


def from_wire(array: np.ndarray, shape: tuple[int, ...], what: str) -> torch.Tensor:
    """A received array as a fresh tensor, checked for dtype, shape and finiteness. The copy
    lives in torch's own aligned memory: the same bits in any transport."""
    if array.dtype != np.float32 or array.shape != tuple(shape):
        raise ProtocolError(f"{what}: got {array.dtype} {array.shape}, expected float32 {shape}")
    if not np.isfinite(array).all():
        raise ProtocolError(f"{what}: contains NaN or Inf")
    return torch.from_numpy(array.copy())


def content_key(*parts: object) -> bytes:
    """A digest of a call's content, to tell an identical retry from another call."""
    h = hashlib.sha256()
    for part in parts:
        if isinstance(part, np.ndarray):
            h.update(repr((part.dtype.str, part.shape)).encode())
            h.update(np.ascontiguousarray(part).tobytes())
        elif isinstance(part, Mapping):
            for k in sorted(part):
                h.update(repr(k).encode())
                h.update(content_key(part[k]))
        elif isinstance(part, Decoded):
            h.update(content_key(part.log_lik, part.grad))
        else:
            h.update(repr(part).encode())
    return h.digest()


def grad_of(leaf: torch.Tensor) -> torch.Tensor:
    return leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)
