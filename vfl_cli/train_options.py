"""Training options of `vfl simulate` and `vfl-coordinator` (and the phase deadline `vfl demo`
shares with the coordinator), declared once. The options of the rounds and the data plane are
declared in vfl_cli.round_options, the privacy options in vfl_cli.privacy_options."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from vfl_cli import defaults
from vfl_cli.options import parse_ints, shown, train_config
from vfl_cli.privacy_options import (
    PrivacyDirectionPower,
    PrivacyEmbeddingClip,
    PrivacyEmbeddingNoise,
    PrivacyFeaturePretrain,
    PrivacyFeatureTower,
    PrivacyGradientDefence,
    PrivacyLabelEpsilon,
    PrivacyLabelPrior,
    PrivacyPretrainCorruption,
    PrivacyPretrainEpochs,
    PrivacyPretrainRows,
    PrivacyScoreBins,
    PrivacyScoreEpsilon,
)
from vfl_cli.round_options import (
    DataPlane,
    EncryptRelay,
    EpochFlow,
    FreshOwnTower,
    LocalSteps,
    OverlapValidation,
    Staleness,
    WireDtype,
)

if TYPE_CHECKING:
    from vfl_core.config import TrainConfig

Opt = typer.Option
# Each option's None keeps the config file's value, else the TrainConfig default shown here.
T, M, DV, DL = defaults.TRAIN, defaults.MODEL, defaults.DVFL, defaults.DLVM

Deadline = Annotated[float, Opt(help="seconds per phase before a party counts as missing")]


@dataclass(frozen=True)
class TrainOptions:
    """Command-line overrides of a TrainConfig; None keeps the config file's value or default."""

    method: Annotated[
        str | None, Opt(help=" | ".join(defaults.METHODS), show_default=shown(T["method"]))
    ] = None
    seed: Annotated[
        int | None, Opt(help="seeds the model, batches and faults", show_default=shown(T["seed"]))
    ] = None
    epochs: Annotated[
        int | None, Opt(help="passes over the training samples", show_default=shown(T["epochs"]))
    ] = None
    batch_size: Annotated[
        str | None,
        Opt(
            help="samples per training round: N | auto (tables: the training rows / "
            f"{defaults.AUTO_ROUNDS_PER_EPOCH}, at least {defaults.DEFAULT_BATCH} and at most "
            f"{defaults.AUTO_MAX_BATCH}; images: {defaults.DEFAULT_BATCH})",
            show_default=shown(T["batch_size"]),
        ),
    ] = None
    lr: Annotated[
        str | None,
        Opt(
            help="learning rate of every party's optimizer: a number | auto (tables: "
            f"{defaults.AUTO_TABLE_LR:g}; images: {defaults.DEFAULT_LR:g})",
            show_default=shown(T["lr"]),
        ),
    ] = None
    weight_decay: Annotated[
        float | None,
        Opt(help="L2 penalty of the optimizers", show_default=shown(T["weight_decay"])),
    ] = None
    lane_weight_decay: Annotated[
        float | None,
        Opt(
            help="L2 penalty of the linear model (--linear-lane: the lanes and linear heads), "
            "in place of --weight-decay",
            show_default=shown(T["lane_weight_decay"]),
        ),
    ] = None
    round_loss: Annotated[
        str | None,
        Opt(
            help="auto (rows on tables, mean on images) | rows (a round's loss weighs its "
            "rows: a short batch counts its rows, not a whole batch) | mean (the mean over "
            "its rows, whatever their number)",
            show_default=shown(T["round_loss"]),
        ),
    ] = None
    optimizer_kernel: Annotated[
        str | None,
        Opt(
            help="fused (torch's one kernel for an optimizer's weights) | loop (its loop over "
            "them: the runs before fused, bit for bit)",
            show_default=shown(T["optimizer_kernel"]),
        ),
    ] = None
    balance: Annotated[
        str | None,
        Opt(help="none | resample (label parties' classes)", show_default=shown(T["balance"])),
    ] = None
    representation: Annotated[
        str | None,
        Opt(
            help="party model: auto | mlp | cnn | resnet18", show_default=shown(M["representation"])
        ),
    ] = None
    embed_dim: Annotated[
        int | None, Opt(help="size of each party's embedding", show_default=shown(M["embed_dim"]))
    ] = None
    hidden: Annotated[
        str | None, Opt(help="hidden sizes, e.g. 128,64", show_default=shown(M["hidden"]))
    ] = None
    head: Annotated[
        str | None,
        Opt(
            help="auto (tables: mlp; images: linear) | linear | mlp | wide (mlp + a linear path)",
            show_default=shown(M["head"]),
        ),
    ] = None
    head_hidden: Annotated[
        int | None,
        Opt(
            help="mlp and wide heads: width of the head's hidden layer",
            show_default=shown(M["head_hidden"]),
        ),
    ] = None
    dropout: Annotated[
        float | None,
        Opt(
            help="tabular party MLPs: dropout after each hidden layer",
            show_default=shown(M["dropout"]),
        ),
    ] = None
    norm: Annotated[
        str | None,
        Opt(
            help="tabular party MLPs: none | layer | batch normalisation of each hidden layer",
            show_default=shown(M["norm"]),
        ),
    ] = None
    categorical_dim: Annotated[
        int | None,
        Opt(
            help="width of each categorical column's embedding (0: 1.6 x categories^0.56, "
            "at most 16)",
            show_default=shown(M["categorical_dim"]),
        ),
    ] = None
    num_embedding: Annotated[
        str | None,
        Opt(
            help="tabular parties: embeddings of numeric columns: none | ple (piecewise-linear "
            "on quantile bins of the party's training rows) | periodic",
            show_default=shown(M["num_embedding"]),
        ),
    ] = None
    num_bins: Annotated[
        int | None,
        Opt(
            help="--num-embedding ple: quantile bins of each numeric column",
            show_default=shown(M["num_bins"]),
        ),
    ] = None
    num_embedding_dim: Annotated[
        int | None,
        Opt(
            help="--num-embedding: values of each numeric column's embedding",
            show_default=shown(M["num_embedding_dim"]),
        ),
    ] = None
    ensemble: Annotated[
        int | None,
        Opt(
            help="tabular parties: members of a TabM-mini ensemble sharing each party's MLP "
            "(--embed-dim must divide by it); 1: none",
            show_default=shown(M["ensemble"]),
        ),
    ] = None
    linear_lane: Annotated[
        int | None,
        Opt(
            help="tabular parties: the last N values of each embedding are a linear map of the "
            "party's row, and each label party trains a linear head on them, a candidate of "
            "the validation choice (LASER-VFL's shape, --concat-choice all); 0: none",
            show_default=shown(M["linear_lane"]),
        ),
    ] = None
    label_smoothing: Annotated[
        float | None,
        Opt(
            help="classification: share of each label spread over the classes in the loss",
            show_default=shown(T["label_smoothing"]),
        ),
    ] = None
    weight_average: Annotated[
        str | None,
        Opt(
            help="evaluate on averaged weights: none | ema (each party's moving average of its "
            "own towers and heads, updated after each step; training steps the live weights)",
            show_default=shown(T["weight_average"]),
        ),
    ] = None
    ema_decay: Annotated[
        float | None,
        Opt(help="--weight-average ema: decay per step", show_default=shown(T["ema_decay"])),
    ] = None
    scheduler: Annotated[
        str | None,
        Opt(
            help="learning rate: auto (tables: decay; images: none) | none (constant) | "
            f"decay (halved every {defaults.DECAY_HALF_LIFE:g} epochs) | cosine (down to 0 at "
            "--epochs)",
            show_default=shown(T["scheduler"]),
        ),
    ] = None
    dvfl_period: Annotated[
        int | None,
        Opt(
            help="dvfl: guests write to the hosts every N local steps",
            show_default=shown(DV["period"]),
        ),
    ] = None
    dvfl_host_steps: Annotated[
        int | None,
        Opt(help="dvfl: replay steps of each host per round", show_default=shown(DV["host_steps"])),
    ] = None
    dvfl_owner_epochs: Annotated[
        int | None,
        Opt(
            help="dvfl: epochs of the label owner on the hosts' codes",
            show_default=shown(DV["owner_epochs"]),
        ),
    ] = None
    dvfl_owner_patience: Annotated[
        int | None,
        Opt(
            help="dvfl: 0 off; N: stop the owner after N epochs without a better accuracy on "
            "its held-out labelled rows (the paper's limited-label runs)",
            show_default=shown(DV["owner_patience"]),
        ),
    ] = None
    dvfl_owner_min_epochs: Annotated[
        int | None,
        Opt(
            help="dvfl: with --dvfl-owner-patience, the owner trains at least N epochs and its "
            "best epoch is chosen from the N-th on",
            show_default=shown(DV["owner_min_epochs"]),
        ),
    ] = None
    dvfl_period_epochs: Annotated[
        int | None,
        Opt(
            help="dvfl: guests write to the hosts in every K-th guest epoch (the paper's "
            "period; unset: --dvfl-period in steps)",
            show_default=shown(DV["period_epochs"]),
        ),
    ] = None
    serve_feature_only: Annotated[
        bool | None,
        Opt(
            help="LASER-VFL heads also serve sets of feature-only parties",
            show_default=shown(T["serve_feature_only"]),
        ),
    ] = None
    wire_dtype: WireDtype = None
    staleness: Staleness = None
    local_steps: LocalSteps = None
    dlvm_stage2_epochs: Annotated[
        int | None,
        Opt(
            help="dlvm: classifier epochs after --epochs of the bound",
            show_default=shown(DL["stage2_epochs"]),
        ),
    ] = None
    dlvm_latent_dim: Annotated[
        int | None, Opt(help="dlvm: size of the latent h", show_default=shown(DL["latent_dim"]))
    ] = None
    dlvm_hidden: Annotated[
        str | None,
        Opt(help="dlvm: hidden sizes of every network", show_default=shown(DL["hidden"])),
    ] = None
    dlvm_kappa: Annotated[
        int | None,
        Opt(help="dlvm: importance samples in training", show_default=shown(DL["kappa"])),
    ] = None
    dlvm_predict_samples: Annotated[
        int | None,
        Opt(
            help="dlvm: importance samples L at inference",
            show_default=shown(DL["predict_samples"]),
        ),
    ] = None
    dlvm_mnar: Annotated[
        bool | None,
        Opt(
            help="dlvm: every party models whether it holds a sample (MNAR)",
            show_default=shown(DL["mnar"]),
        ),
    ] = None
    dlvm_predict: Annotated[
        str | None,
        Opt(
            help="dlvm: snis (the paper's weights) | average (equal weights)",
            show_default=shown(DL["predict"]),
        ),
    ] = None
    dlvm_expert_dropout: Annotated[
        float | None,
        Opt(
            help="dlvm: leave each expert out of a training posterior with P (not the paper's)",
            show_default=shown(DL["expert_dropout"]),
        ),
    ] = None
    dlvm_posterior: Annotated[
        str | None,
        Opt(
            help="dlvm: mean (the paper's Eq. (1): means averaged, precisions summed) | product "
            "(product of experts, not the paper's)",
            show_default=shown(DL["posterior"]),
        ),
    ] = None
    dlvm_stage2: Annotated[
        str | None,
        Opt(
            help="dlvm: frozen (the paper's: only the classifier learns, no gradient on the "
            "wire) | finetune (the encoders learn too, not the paper's)",
            show_default=shown(DL["stage2"]),
        ),
    ] = None
    dlvm_mnar_model: Annotated[
        str | None,
        Opt(
            help="dlvm --dlvm-mnar: features (the paper's p(m_k | x_k), a missing block's "
            "features from its decoder) | latent (p(m_k | h), not the paper's)",
            show_default=shown(DL["mnar_model"]),
        ),
    ] = None
    early_stop_patience: Annotated[
        int | None,
        Opt(
            help="0: off; N: stop after N epochs without a better validation metric and "
            f"restore the best epoch's weights (unset: {defaults.AUTO_PATIENCE} on tables, "
            f"{defaults.AUTO_STALE_PATIENCE} with --staleness, off on images; off on a table "
            "whose validation split would hold under 100 samples, which then trains "
            f"{defaults.AUTO_SMALL_EPOCHS} epochs)",
            show_default=shown(T["early_stop_patience"]),
        ),
    ] = None
    early_stop_min_improvement: Annotated[
        float | None,
        Opt(
            "--min-improvement",
            help="with early stopping: an epoch restarts the patience only if it beats the last "
            "one that did by this share of its validation metric (0: any gain)",
            show_default=shown(T["early_stop_min_improvement"]),
        ),
    ] = None
    early_stop_min_epochs: Annotated[
        int | None,
        Opt(
            help="with early stopping: no stop before this many epochs (unset: "
            f"{defaults.AUTO_STALE_MIN_EPOCHS} with --staleness and the default patience, "
            "else 0)",
            show_default=shown(T["early_stop_min_epochs"]),
        ),
    ] = None
    overlap_validation: OverlapValidation = None
    epoch_flow: EpochFlow = None
    fresh_own_tower: FreshOwnTower = None
    validation_fraction: Annotated[
        float | None,
        Opt(
            help="with early stopping: share of the training samples held out",
            show_default=shown(T["validation_fraction"]),
        ),
    ] = None
    unvalidated_heads: Annotated[
        str | None,
        Opt(
            help="where nothing is held out to choose on (a small table, or early stopping "
            "off): auto (blend for a regression, laser for classes) | laser (LASER-VFL's "
            "heads) | blend (the mean of the label party's heads)",
            show_default=shown(T["unvalidated_heads"]),
        ),
    ] = None
    threshold: Annotated[
        str | None,
        Opt(
            help="binary tasks: auto (platt) | platt (Platt scaling fitted on the validation "
            "split) | accuracy (the best accuracy there) | accuracy-1se (that, if better than "
            "0.5 by more than one standard error) | f1 (the best F1 there) | a probability "
            "(0.5: the plain argmax)",
            show_default=shown(T["threshold"]),
        ),
    ] = None
    subset_choice: Annotated[
        str | None,
        Opt(
            help="validation: each observed set predicted from its best subset of parties on "
            "the validation split when better by more than one standard error | best: the "
            "strictly best there | plain: from all of them (the paper)",
            show_default=shown(T["subset_choice"]),
        ),
    ] = None
    concat_head: Annotated[
        bool | None,
        Opt(
            help="LASER-VFL: label parties also train a head on the zero-filled concatenation "
            "of the present embeddings; the validation split chooses it (--concat-choice) where "
            "it beats LASER-VFL's heads by more than one standard error",
            show_default="on for tables, off for images",
        ),
    ] = None
    concat_choice: Annotated[
        str | None,
        Opt(
            help="with --concat-head: sets (chosen per observed set on its validation samples) "
            "| all (once for every set holding a label party, on all their samples together; "
            "the mean of the heads' predictions is a candidate too)",
            show_default=shown(T["concat_choice"]),
        ),
    ] = None
    concat_weight: Annotated[
        float | None,
        Opt(
            help="with --concat-head: the weight of its loss term on a batch beside LASER-VFL's "
            "(whose weights sum to 4.8 for a label party among three parties); 1 weighs it as "
            "one of them",
            show_default=shown(T["concat_weight"]),
        ),
    ] = None
    validation_split: Annotated[
        str | None,
        Opt(
            help="with early stopping: random | stratified (classification: every class held "
            "out in its share of the label party's rows; regression stays random)",
            show_default=shown(T["validation_split"]),
        ),
    ] = None
    target_transform: Annotated[
        str | None,
        Opt(
            help="regression: none | log (heads learn log(1 + y), predictions in original "
            "units) | auto (log where the label party's training targets are non-negative "
            "and skewed)",
            show_default=shown(T["target_transform"]),
        ),
    ] = None

    privacy_gradient_defence: PrivacyGradientDefence = None
    privacy_feature_pretrain: PrivacyFeaturePretrain = None
    privacy_pretrain_epochs: PrivacyPretrainEpochs = None
    privacy_pretrain_corruption: PrivacyPretrainCorruption = None
    privacy_pretrain_rows: PrivacyPretrainRows = None
    privacy_feature_tower: PrivacyFeatureTower = None
    privacy_direction_power: PrivacyDirectionPower = None
    privacy_embedding_clip: PrivacyEmbeddingClip = None
    privacy_embedding_noise: PrivacyEmbeddingNoise = None
    privacy_label_epsilon: PrivacyLabelEpsilon = None
    privacy_label_prior: PrivacyLabelPrior = None

    privacy_score_epsilon: PrivacyScoreEpsilon = None
    privacy_score_bins: PrivacyScoreBins = None
    encrypt_relay: EncryptRelay = None
    data_plane: DataPlane = None

    def config(self, base: dict[str, Any]) -> TrainConfig:
        """The TrainConfig of a config file's mapping with these options applied over it."""
        overrides = dataclasses.asdict(self)
        overrides["hidden"] = parse_ints(self.hidden, "--hidden")
        overrides["dlvm_hidden"] = parse_ints(self.dlvm_hidden, "--dlvm-hidden")
        return train_config(base, **overrides)
