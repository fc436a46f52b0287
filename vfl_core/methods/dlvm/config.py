"""The latent-variable VFL's own settings (part of TrainConfig; torch-free so configs load fast).

Stage 1 (the importance-weighted bound over every training sample) runs `TrainConfig.epochs`
epochs; stage 2 (the classifier on the active party's labelled rows) runs `stage2_epochs` more.
Both use the run's optimiser, learning rate and batch size.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class DlvmConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    latent_dim: int = Field(16, ge=1, le=4096)  # h, shared by every party's expert
    z_dim: int = Field(8, ge=1, le=4096)  # z, the active party's prior over h
    hidden: tuple[int, ...] = (128,)  # every network's hidden layers
    kappa: int = Field(10, ge=1, le=1000)  # importance samples in training (the paper's 10)
    predict_samples: int = Field(50, ge=1, le=10000)  # L for SNIS prediction (the paper's 50)
    # snis: the paper's self-normalised importance weights; average: p(y | h) averaged with equal
    # weights over the L samples of the posterior (not the paper's; its weights are nearly
    # one-hot on images, so SNIS predicts from about one sample: benchmarks/results/dlvm.md)
    predict: Literal["snis", "average"] = "snis"
    stage2_epochs: int = Field(30, ge=0)
    # mean: the paper's Eq. (1), the observed experts' means averaged, precisions summed;
    # product: the exact product of the Gaussian experts (means weighted by precision; not the
    # paper's, this project's earlier default)
    posterior: Literal["mean", "product"] = "mean"
    # frozen: the paper's stage 2 (Algorithm 1, line 15): Theta_g fixed, only the classifier
    # learns, no gradient leaves the active party; finetune (not the paper's): every party's
    # encoder learns from the classifier's loss through DlvmBackward messages
    stage2: Literal["frozen", "finetune"] = "frozen"
    mnar: bool = False  # each party also models whether it holds a sample (FALSE-VFL-II)
    # features: the paper's App. A.2, p(m_k | x_k) from the party's features (a missing block's
    # features sampled from its decoder at each h); latent (not the paper's): p(m_k | h), linear
    mnar_model: Literal["features", "latent"] = "features"
    # Not in the paper: each training step leaves each observed expert out of the posterior with
    # this probability (at least one stays). The decoders still score every observed block, so
    # the bound stays a bound; the encoders learn posteriors from fewer blocks, as at inference
    # under missingness. 0: the paper's posterior of every observed block.
    expert_dropout: float = Field(0.0, ge=0.0, lt=1.0)

    @field_validator("hidden")
    @classmethod
    def _positive(cls, sizes: tuple[int, ...]) -> tuple[int, ...]:
        if any(s < 1 or s > 65536 for s in sizes):
            raise ValueError(f"layer sizes must be in 1..65536, got {list(sizes)}")
        return sizes
