"""Training options of `vfl simulate` and `vfl-coordinator` (and the phase deadline `vfl demo`
shares with the coordinator), declared once."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from vfl_cli.options import parse_ints, train_config
from vfl_core.config import METHODS, TrainConfig

Opt = typer.Option

Deadline = Annotated[float, Opt(help="seconds per phase before a party counts as missing")]


@dataclass(frozen=True)
class TrainOptions:
    """Command-line overrides of a TrainConfig; None keeps the config file's value or default."""

    method: Annotated[str | None, Opt(help=" | ".join(METHODS))] = None
    seed: Annotated[int | None, Opt()] = None
    epochs: Annotated[int | None, Opt()] = None
    batch_size: Annotated[int | None, Opt()] = None
    lr: Annotated[float | None, Opt()] = None
    weight_decay: Annotated[float | None, Opt()] = None
    balance: Annotated[str | None, Opt(help="none | resample")] = None
    representation: Annotated[str | None, Opt(help="auto | mlp | cnn | resnet18")] = None
    embed_dim: Annotated[int | None, Opt()] = None
    hidden: Annotated[str | None, Opt(help="hidden sizes, e.g. 128,64")] = None
    head: Annotated[str | None, Opt(help="linear | mlp")] = None
    dvfl_period: Annotated[
        int | None, Opt(help="dvfl: guests write to the hosts every N local steps (default 1)")
    ] = None
    dvfl_host_steps: Annotated[
        int | None, Opt(help="dvfl: replay steps of each host per round (default 2)")
    ] = None
    dvfl_owner_epochs: Annotated[
        int | None, Opt(help="dvfl: epochs of the label owner on the hosts' codes (default 60)")
    ] = None
    serve_feature_only: Annotated[
        bool | None,
        Opt(help="LASER-VFL heads also serve sets of feature-only parties (default: yes)"),
    ] = None
    wire_dtype: Annotated[
        str | None,
        Opt(help="embeddings and gradients on the wire: float32 | float16 | bfloat16 | int8"),
    ] = None
    staleness: Annotated[
        int | None,
        Opt(help="0: exact rounds; S >= 1: pipelined rounds that may miss up to S updates"),
    ] = None
    dlvm_stage2_epochs: Annotated[
        int | None, Opt(help="dlvm: classifier epochs after --epochs of the bound (default 30)")
    ] = None
    dlvm_latent_dim: Annotated[int | None, Opt(help="dlvm: size of the latent h (default 16)")] = (
        None
    )
    dlvm_hidden: Annotated[
        str | None, Opt(help="dlvm: hidden sizes of every network (default 128)")
    ] = None
    dlvm_kappa: Annotated[
        int | None, Opt(help="dlvm: importance samples in training (default 10)")
    ] = None
    dlvm_predict_samples: Annotated[
        int | None, Opt(help="dlvm: importance samples L at inference (default 50)")
    ] = None
    dlvm_mnar: Annotated[
        bool | None, Opt(help="dlvm: every party models whether it holds a sample (MNAR)")
    ] = None
    dlvm_predict: Annotated[
        str | None, Opt(help="dlvm: snis (the paper's weights) | average (equal weights)")
    ] = None
    dlvm_expert_dropout: Annotated[
        float | None,
        Opt(help="dlvm: leave each expert out of a training posterior with P (not the paper's)"),
    ] = None
    early_stop_patience: Annotated[
        int | None,
        Opt(
            help="0: off; N: stop after N epochs without a better validation metric and "
            "restore the best epoch's weights (default: 5 on tables, off on images)"
        ),
    ] = None
    validation_fraction: Annotated[
        float | None,
        Opt(help="with early stopping: share of the training samples held out"),
    ] = None
    threshold: Annotated[
        str | None,
        Opt(
            help="binary tasks: auto (the best F1 on the validation split) | a probability "
            "(0.5: the plain argmax)"
        ),
    ] = None
    subset_choice: Annotated[
        str | None,
        Opt(
            help="validation: each observed set predicted from its best subset of parties on "
            "the validation split | plain: from all of them (the paper)"
        ),
    ] = None

    def config(self, base: dict[str, Any]) -> TrainConfig:
        """The TrainConfig of a config file's mapping with these options applied over it."""
        overrides = dataclasses.asdict(self)
        overrides["hidden"] = parse_ints(self.hidden, "--hidden")
        overrides["dlvm_hidden"] = parse_ints(self.dlvm_hidden, "--dlvm-hidden")
        return train_config(base, **overrides)
