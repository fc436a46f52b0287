"""The privacy options (TrainOptions, vfl_cli.train_options; PrivacyConfig): the label party's
gradient defences and randomised labels, the feature parties' towers and pretraining, the
embeddings' clip and noise, the scores' privacy. Each is an Annotated type that a TrainOptions
field takes, with its help and the default it shows (docs/security.md)."""

from __future__ import annotations

from typing import Annotated

import typer

from vfl_cli import defaults
from vfl_cli.options import shown

Opt = typer.Option
PV = defaults.PRIVACY  # None keeps the config file's value, else the PrivacyConfig default

PrivacyGradientDefence = Annotated[
    str | None,
    Opt(
        help="label party, on the gradients it sends: none | max_norm (Li et al. 2022) | "
        "direction (Marvell-style noise along the class-mean difference) | "
        "max_norm_direction (both) | max_norm_direction_per_row (both, each row's noise "
        "the same every epoch) | withhold (no gradient to the other parties, whose bottom "
        "models stay as drawn or as --privacy-feature-pretrain left them; recommended with "
        "--privacy-feature-tower orthogonal --head-hidden 1024, docs/security.md)",
        show_default=shown(PV["gradient_defence"]),
    ),
]

PrivacyFeaturePretrain = Annotated[
    str | None,
    Opt(
        help="with withhold, each feature-only party, before training: none (its tower "
        "as drawn) | denoise (its tower trained on its own rows without labels: VIME's "
        "denoising objective on SCARF's corruption; docs/security.md) | contrast (SCARF's "
        "contrastive objective instead) | both (the two summed)",
        show_default=shown(PV["feature_pretrain"]),
    ),
]

PrivacyPretrainEpochs = Annotated[
    int | None,
    Opt(
        help="--privacy-feature-pretrain: passes over the party's training rows",
        show_default=shown(PV["pretrain_epochs"]),
    ),
]

PrivacyPretrainCorruption = Annotated[
    float | None,
    Opt(
        help="--privacy-feature-pretrain: the chance each entry is swapped with the same "
        "column of another row",
        show_default=shown(PV["pretrain_corruption"]),
    ),
]

PrivacyPretrainRows = Annotated[
    str | None,
    Opt(
        help="--privacy-feature-pretrain on: train (the party's training rows) | all "
        "(every row it holds, the ones it will be asked to predict too; features only)",
        show_default=shown(PV["pretrain_rows"]),
    ),
]

PrivacyFeatureTower = Annotated[
    str | None,
    Opt(
        help="with withhold, each feature-only party's tower: model (the run's architecture) "
        "| orthogonal (its block rotated by a fixed orthogonal map drawn from the party's "
        "own vfl-client --private-tower-seed, zero-padded to --embed-dim; docs/security.md)",
        show_default=shown(PV["feature_tower"]),
    ),
]

PrivacyDirectionPower = Annotated[
    float | None,
    Opt(
        help="direction noise: variance as a multiple of the squared class-mean distance",
        show_default=shown(PV["direction_power"]),
    ),
]

PrivacyEmbeddingClip = Annotated[
    float | None,
    Opt(
        help="every party: clip each training embedding to this L2 norm (default: no clip)",
        show_default=shown(PV["embedding_clip"]),
    ),
]

PrivacyEmbeddingNoise = Annotated[
    float | None,
    Opt(
        help="Gaussian noise on the clipped embeddings, std = this x the clip (epsilon in "
        "results.json)",
        show_default=shown(PV["embedding_noise"]),
    ),
]

PrivacyLabelEpsilon = Annotated[
    float | None,
    Opt(
        help="label party: randomised response on its training labels, epsilon-label-DP "
        "(default: the true labels)",
        show_default=shown(PV["label_epsilon"]),
    ),
]

PrivacyLabelPrior = Annotated[
    str | None,
    Opt(
        help="label party: the prior of that randomised response: uniform (plain) | "
        "class_frequency | own_features (RR-with-prior in two stages, Ghazi et al. 2021, "
        "the prior from a logistic regression on its own features; docs/security.md)",
        show_default=shown(PV["label_prior"]),
    ),
]

PrivacyScoreEpsilon = Annotated[
    float | None,
    Opt(
        help="label party: scores evaluations against one randomised-response copy of its "
        "labels, epsilon-label-DP (default: the true labels)",
        show_default=shown(PV["score_epsilon"]),
    ),
]

PrivacyScoreBins = Annotated[
    int | None,
    Opt(
        help="label party: its AUC histograms in this many bins (a divisor of 1000)",
        show_default=shown(PV["score_bins"]),
    ),
]
