"""The reconstruction loss of an autoencoder, shared by DVFL's guests and hosts
(vfl_core.methods.dvfl) and the label-free feature towers of the privacy defences
(vfl_core.privacy.pretrain): one implementation, below both packages."""

from __future__ import annotations

import torch


def reconstruction_loss(
    recon: torch.Tensor, target: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Mean squared error over the entries that `mask` keeps (all without a mask)."""
    err = (recon - target) ** 2  # (B, F)
    if mask is None:
        return err.mean()
    return (err * mask).sum() / mask.sum().clamp_min(1.0)
