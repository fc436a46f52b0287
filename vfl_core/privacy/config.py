"""What a party does to protect its labels and features before tensors leave it (issue 32).

Every defence is off by default (the paper's protocol); each is a setting of the party that
applies it, written in the run record with what it cost (benchmarks/results/privacy.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from vfl_core.privacy.label_prior import LabelPrior

GradientDefence = Literal[
    "none", "max_norm", "direction", "max_norm_direction", "max_norm_direction_per_row", "withhold"
]
FeaturePretrain = Literal["none", "denoise", "contrast", "both"]
FeatureTower = Literal["model", "orthogonal"]


class PrivacyConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    # At the label party, on the gradients it sends for other parties' embeddings:
    # max_norm (Li et al. 2022, Sec. 5) or direction (Marvell-style noise along the difference
    # of the class means, `direction_power` times its squared length), or both in that order
    # (max_norm_direction: the norms equalised, then a milder direction noise). Their noise is
    # drawn afresh every round, so a party that sums a row's gradients over the epochs averages
    # it out (issue 44); max_norm_direction_per_row draws each row's noise once (the same
    # direction and multiplier in every epoch, scaled to the round's batch), so the sum keeps
    # it. withhold: the label party sends zero gradients to the other parties, which take no
    # optimiser step on them (their bottom models stay as drawn: a step would still apply the
    # weight decay; nothing about a label reaches them through training).
    gradient_defence: GradientDefence = "none"
    direction_power: float = Field(1.0, gt=0)
    # With withhold, at each feature-only party, once before training: its tower trained on its
    # own training rows without labels (denoise: VIME's self-supervised objective on SCARF's
    # corruption, vfl_core.privacy.pretrain), `pretrain_epochs` passes, each entry swapped with
    # another row's at `pretrain_corruption`; contrast: SCARF's contrastive loss on the same
    # corruption instead, both: the two losses summed; none = the tower as drawn. On its
    # training rows (`pretrain_rows` train) or on every row it holds, the rows it will be asked
    # to predict too (all: their features only, no label exists at a feature-only party).
    feature_pretrain: FeaturePretrain = "none"
    pretrain_epochs: int = Field(20, ge=1, le=1000)
    pretrain_corruption: float = Field(0.3, gt=0, lt=1)
    pretrain_rows: Literal["train", "all"] = "train"
    # With withhold, each feature-only party's tower: model (the run's architecture, as drawn
    # or pretrained) or orthogonal (its block rotated by a fixed orthogonal matrix drawn from a
    # seed only that party holds, zero-padded to embed_dim: vfl_core.privacy.private_tower).
    feature_tower: FeatureTower = "model"
    # At every party, on the embeddings it sends in training: each row clipped to L2 norm
    # `embedding_clip`, plus Gaussian noise of std `embedding_noise` * clip (DP-SGD's Gaussian
    # mechanism on the released embedding; epsilon reported at `delta`).
    embedding_clip: float | None = Field(None, gt=0)
    embedding_noise: float = Field(0.0, ge=0)
    delta: float = Field(1e-5, gt=0, lt=1)
    # At the label party, once before training: k-ary randomised response on the training labels
    # (epsilon-label-DP); None = the true labels.
    label_epsilon: float | None = Field(None, gt=0)
    # The prior of that randomised response (Ghazi et al., NeurIPS 2021, RRWithPrior in two
    # stages, LP-2ST: vfl_core.privacy.label_prior): uniform = plain k-ary randomised response;
    # class_frequency or own_features = half the rows through it, the rest through
    # randomised response restricted to the labels a prior fitted on the first half's
    # randomised labels ranks highest (a constant, or a logistic regression on the label
    # party's own features). epsilon-label-DP as well, each label randomised once.
    label_prior: LabelPrior = "uniform"
    # At the label party, on what it tells the coordinator in Score: it scores every evaluation
    # against one randomised-response copy of its labels, drawn once per split (epsilon-label-
    # DP per row, whatever the coordinator asks), so that pairing the aggregates with the
    # predictions the coordinator relays determines no true label; None = the true labels.
    score_epsilon: float | None = Field(None, gt=0)
    # At the label party: its AUC histograms in this many equal bins (a divisor of the 1000 the
    # wire carries; each coarse bin's counts in its first fine bin), so fewer probability ranges
    # the coordinator can pair with the probabilities it relays; the AUC counts ties within a
    # bin as half, so it is exact to 1 / score_bins.
    score_bins: int = Field(1000, ge=1, le=1000)

    @model_validator(mode="after")
    def _noise_needs_clip(self) -> PrivacyConfig:
        if 1000 % self.score_bins:
            raise ValueError(f"score_bins must divide 1000, not {self.score_bins}")
        if self.feature_pretrain != "none" and self.gradient_defence != "withhold":
            raise ValueError(
                "feature_pretrain needs gradient_defence withhold: otherwise the label-derived "
                "gradients train the feature parties' towers anyway"
            )
        if self.feature_tower != "model" and self.gradient_defence != "withhold":
            raise ValueError(
                "feature_tower orthogonal needs gradient_defence withhold: the map is fixed, "
                "a party never steps it"
            )
        if self.feature_tower != "model" and self.feature_pretrain != "none":
            raise ValueError("feature_tower orthogonal is fixed: feature_pretrain must be none")
        if self.label_prior != "uniform" and self.label_epsilon is None:
            raise ValueError(
                "label_prior needs label_epsilon: it is the prior of its randomised response"
            )
        if self.embedding_noise > 0 and self.embedding_clip is None:
            raise ValueError(
                "embedding_noise needs embedding_clip: the noise is scaled to the clip norm"
            )
        return self

    @property
    def active(self) -> bool:
        return (
            self.gradient_defence != "none"
            or self.embedding_clip is not None
            or self.label_epsilon is not None
            or self.score_epsilon is not None
            or self.score_bins != 1000
        )
