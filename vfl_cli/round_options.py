"""The options of the rounds and the data plane (TrainOptions, vfl_cli.train_options): how rounds
overlap (staleness, local steps, the late verdict, epoch flow, the label party's own tower) and how
their tensors travel (wire dtype, the sealed relay, the data plane). Each is an Annotated type that
a TrainOptions field takes, with its help and the default it shows."""

from __future__ import annotations

from typing import Annotated

import typer

from vfl_cli import defaults
from vfl_cli.options import shown

Opt = typer.Option
T = defaults.TRAIN  # None keeps the config file's value, else the TrainConfig default shown here

WireDtype = Annotated[
    str | None,
    Opt(
        help="embeddings and gradients on the wire: float32 | float16 | bfloat16 | int8",
        show_default=shown(T["wire_dtype"]),
    ),
]

Staleness = Annotated[
    int | None,
    Opt(
        help="0: exact rounds; S >= 1: pipelined rounds that may miss up to S updates "
        "(unset: exact, except on tables where nothing needs exact rounds: "
        "docs/tabular-defaults.md)",
        show_default=f"{defaults.AUTO_STALENESS} on tables, 0 on images",
    ),
]

LocalSteps = Annotated[
    int | None,
    Opt(
        help="R >= 1: after each round every party takes R more steps, at half the rate, on "
        "the round's cached embeddings and gradients (compute per round x (R + 1); "
        "docs/local-updates.md)",
        show_default=shown(T["local_steps"]),
    ),
]

OverlapValidation = Annotated[
    bool | None,
    Opt(
        help="with early stopping: score epoch e's validation while epoch e + 1 trains "
        "(the epoch's end off the critical path on the direct plane); the stop decision "
        "comes one epoch late (up to one epoch more trained), the best epoch still restored",
        show_default="on with the tables' staleness, else off",
    ),
]

EpochFlow = Annotated[
    bool | None,
    Opt(
        help="with --staleness and --overlap-validation: the rounds run on across an "
        "epoch's end (the next epoch's first block misses the last block's updates), each "
        "party validating at its own epoch's end; changes the math",
        show_default=(
            "on with the tables' staleness, else off" if defaults.AUTO_EPOCH_FLOW else "off"
        ),
    ),
]

FreshOwnTower = Annotated[
    bool | None,
    Opt(
        help="with --staleness and one label party: its own tower exact (embedded at each "
        "round's fuse with its current weights and stepped there), only the feature "
        "parties' embeddings stale; changes the math",
        show_default=(
            "on with the tables' staleness and one label party, else off"
            if defaults.AUTO_FRESH_OWN_TOWER
            else "off"
        ),
    ),
]

EncryptRelay = Annotated[
    bool | None,
    Opt(
        help="embeddings and gradients encrypted end to end between parties (needs TLS): "
        "the coordinator relays what it cannot read",
        show_default=shown(T["encrypt_relay"]),
    ),
]

DataPlane = Annotated[
    str | None,
    Opt(
        help="auto: direct where every party reaches its peers, else relay; relay: tensors "
        "through the coordinator; direct: party to party over mutual TLS, the coordinator "
        "sees none (docs/data-plane.md)",
        show_default="auto on tables, relay on images",
    ),
]
