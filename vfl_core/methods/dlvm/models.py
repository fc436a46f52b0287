"""Networks of the latent-variable VFL: each party's encoder and decoder (and, for MNAR, its
missingness model); the active party's q(z | h), p(h | z) and classifier p(y | h).

Every network is an MLP (vfl_core.model.models.MLPRepresentation) built from an explicit seed, so
the
same (seed, block, role) always gives the same initial weights, in any process.
"""

from __future__ import annotations

import math
from enum import IntEnum
from typing import Literal

import torch
from torch import nn

from vfl_core.methods.dlvm import latent_math as dm
from vfl_core.methods.dlvm.config import DlvmConfig
from vfl_core.model.models import MLPRepresentation, build_seeded
from vfl_core.seeding import Stream, derive_seed

Likelihood = Literal["bernoulli", "gaussian"]


class Role(IntEnum):
    """Seed parts of the networks; values are part of the reproducibility contract."""

    ENCODER = 1
    DECODER = 2
    MISSINGNESS = 3
    Q_Z = 4
    P_H = 5
    CLASSIFIER = 6


def _mlp(in_features: int, hidden: tuple[int, ...], out: int, seed: int, block: int, role: Role):
    def factory() -> nn.Module:
        return MLPRepresentation(in_features, hidden, out, final_activation=False)

    return build_seeded(derive_seed(seed, Stream.DLVM_INIT, block, int(role)), factory)


def _flat(h: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int]]:
    """(B, S, d) -> (B * S, d), and (B, S) to restore."""
    return h.reshape(-1, h.shape[-1]), (h.shape[0], h.shape[1])


class GaussianNet(nn.Module):
    """x (B, ...) -> a diagonal Gaussian (mean, log-variance), (B, d) each."""

    def __init__(self, body: nn.Module, out_dim: int) -> None:
        super().__init__()
        self.body = body
        self.out_dim = out_dim

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.body(x)  # (B, 2d)
        return out[:, : self.out_dim], dm.clamp_logvar(out[:, self.out_dim :])


class Decoder(nn.Module):
    """p(x_k | h): Bernoulli logits for images in [0, 1], else a Gaussian with one learned
    log-variance per feature."""

    def __init__(self, body: nn.Module, features: int, likelihood: Likelihood) -> None:
        super().__init__()
        self.body = body
        self.likelihood = likelihood
        self.logvar = nn.Parameter(torch.zeros(features)) if likelihood == "gaussian" else None

    def log_prob(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """x (B, F) flattened block, h (B, S, d) -> log p(x | h_s), (B, S)."""
        flat, (b, s) = _flat(h)
        out = self.body(flat).reshape(b, s, -1)  # (B, S, F)
        target = x.unsqueeze(1)  # (B, 1, F)
        if self.logvar is None:
            return dm.bernoulli_log_prob(target, out)
        return dm.gaussian_log_prob(target, out, dm.clamp_logvar(self.logvar))

    def mean(self, h: torch.Tensor) -> torch.Tensor:
        """E[x | h_s]: h (B, S, d) -> (B, S, F) (pixel probabilities, or the Gaussian mean)."""
        flat, (b, s) = _flat(h)
        out = self.body(flat).reshape(b, s, -1)  # (B, S, F)
        return torch.sigmoid(out) if self.logvar is None else out


class BlockModels(nn.Module):
    """Party k's networks: encoder q_k(h | x_k), decoder p(x_k | h), and for MNAR the
    missingness model psi^k: a logit of p(m_k = 1) from the block's features x_k (the paper's
    App. A.2; a missing block's features are the decoder's mean at h), or from h itself
    (DlvmConfig.mnar_model "latent", not the paper's)."""

    def __init__(
        self,
        config: DlvmConfig,
        block: int,
        feature_shape: tuple[int, ...],
        likelihood: Likelihood,
        seed: int,
    ) -> None:
        super().__init__()
        features = math.prod(feature_shape)
        d = config.latent_dim
        encoder = _mlp(features, config.hidden, 2 * d, seed, block, Role.ENCODER)
        self.encoder = GaussianNet(encoder, d)
        body = _mlp(d, config.hidden, features, seed, block, Role.DECODER)
        self.decoder = Decoder(body, features, likelihood)
        self.from_features = config.mnar_model == "features"
        inputs = features if self.from_features else d
        self.missingness = (
            _mlp(inputs, (), 1, seed, block, Role.MISSINGNESS) if config.mnar else None
        )

    def missing_log_prob(self, x: torch.Tensor | None, h: torch.Tensor) -> torch.Tensor:
        """log p(m_k | .) at the samples h (B, S, d) -> (B, S): held (x (B, F), the party's
        features) or missing (x None). From features, a held block's term is the same at
        every h_s; a missing block's reads the decoder's mean at h_s in place of x_k."""
        assert self.missingness is not None
        b, s = h.shape[0], h.shape[1]
        if not self.from_features:
            logit = self.missingness(_flat(h)[0]).reshape(b, s)
        elif x is not None:
            logit = self.missingness(x).reshape(b, 1).expand(b, s)
        else:
            imputed = self.decoder.mean(h)  # (B, S, F)
            logit = self.missingness(imputed.reshape(b * s, -1)).reshape(b, s)
        return nn.functional.logsigmoid(logit if x is not None else -logit)


class ActiveModels(nn.Module):
    """The active party's networks: q(z | h), p(h | z) and the classifier p(y | h)."""

    def __init__(self, config: DlvmConfig, block: int, num_classes: int, seed: int) -> None:
        super().__init__()
        d, dz, hidden = config.latent_dim, config.z_dim, config.hidden
        self.q_z = GaussianNet(_mlp(d, hidden, 2 * dz, seed, block, Role.Q_Z), dz)
        self.p_h = GaussianNet(_mlp(dz, hidden, 2 * d, seed, block, Role.P_H), d)
        self.classifier = _mlp(d, hidden, num_classes, seed, block, Role.CLASSIFIER)

    @property
    def generative(self) -> nn.ModuleList:
        """q(z | h) and p(h | z): what stage 1 trains at the active party."""
        return nn.ModuleList([self.q_z, self.p_h])

    def prior_terms(self, h: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """log p(z) + log p(h | z) - log q(z | h) for z ~ q(z | h) (reparameterised with
        ``noise``, (B, S, dz)); h (B, S, d) -> (B, S)."""
        flat, (b, s) = _flat(h)
        mean_z, logvar_z = self.q_z(flat)  # (B*S, dz)
        z = mean_z + torch.exp(0.5 * logvar_z) * noise.reshape(-1, noise.shape[-1])
        mean_h, logvar_h = self.p_h(z)  # (B*S, d)
        terms = (
            dm.standard_normal_log_prob(z)
            + dm.gaussian_log_prob(flat, mean_h, logvar_h)
            - dm.gaussian_log_prob(z, mean_z, logvar_z)
        )
        return terms.reshape(b, s)

    def class_log_probs(self, h: torch.Tensor) -> torch.Tensor:
        """log p(y | h_s) for every class: (B, S, d) -> (B, S, C)."""
        flat, (b, s) = _flat(h)
        return torch.log_softmax(self.classifier(flat), dim=-1).reshape(b, s, -1)
