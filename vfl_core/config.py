"""Typed, frozen configuration models. They live at the edges (CLIs, wire, checkpoints)."""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Representation = Literal["auto", "mlp", "cnn", "resnet18"]
HeadKind = Literal["linear", "mlp"]
Method = Literal[
    "laser", "local", "ensemble", "svfl", "combinatorial", "plug", "zerofill", "stale", "dvfl"
]
METHODS: tuple[str, ...] = get_args(Method)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ModelConfig(_Frozen):
    """Architecture shared by every party. All parties use the same embedding size."""

    representation: Representation = "auto"
    embed_dim: int = Field(64, ge=1, le=65536)
    hidden: tuple[int, ...] = (256,)
    head: HeadKind = "linear"
    head_hidden: int = Field(64, ge=1)


class DvflConfig(_Frozen):
    """Decoupled VFL (vfl_core.dvfl): the three tiers' sizes and the schedule. The defaults are
    the DVFL paper's MNIST setup (guest 196-100-80, host 4x80-200-160, owner 4x160-160-40-10).
    Guests and hosts use the run's optimiser, lr and weight decay; the owner plain SGD."""

    guest_hidden: tuple[int, ...] = (100,)
    guest_dim: int = Field(80, ge=1, le=65536)  # a guest's activation (its autoencoder's code)
    host_hidden: tuple[int, ...] = (200,)
    host_dim: int = Field(160, ge=1, le=65536)  # a host's output (its autoencoder's code)
    owner_hidden: tuple[int, ...] = (160, 40)
    # Communication period in local steps: guests write their activations to the hosts every
    # `period` rounds (1: every round).
    period: int = Field(1, ge=1, le=1_000_000)
    # Replay steps of every host per round (2: the paper's 40 host epochs over 20 guest epochs).
    host_steps: int = Field(2, ge=0, le=1000)
    owner_epochs: int = Field(60, ge=1)  # the label owner's epochs on the frozen hosts' outputs
    owner_lr: float = Field(8e-2, gt=0)
    owner_momentum: float = Field(0.0, ge=0, lt=1)

    @field_validator("guest_hidden", "host_hidden", "owner_hidden")
    @classmethod
    def _positive(cls, sizes: tuple[int, ...]) -> tuple[int, ...]:
        if any(s < 1 or s > 65536 for s in sizes):
            raise ValueError(f"layer sizes must be in 1..65536, got {list(sizes)}")
        return sizes


class TrainConfig(_Frozen):
    """Everything that fixes a training run. One seed fixes plans, task samples and weights."""

    method: Method = "laser"
    seed: int = 0
    epochs: int = Field(60, ge=0)
    batch_size: int = Field(64, ge=1)
    eval_batch_size: int = Field(512, ge=1)
    lr: float = Field(1e-3, gt=0)
    weight_decay: float = Field(1e-4, ge=0)
    optimizer: Literal["adam", "sgd"] = "adam"
    momentum: float = Field(0.9, ge=0, lt=1)
    scheduler: Literal["none", "cosine"] = "none"
    # "resample": class-balanced resampling of each epoch's plan (the paper's Credit setup).
    # The label party then tells the coordinator each training sample's class weight.
    balance: Literal["none", "resample"] = "none"
    model: ModelConfig = ModelConfig()
    dvfl: DvflConfig = DvflConfig()  # used by method "dvfl" only

    @model_validator(mode="after")
    def _dvfl_constant_lr(self) -> TrainConfig:
        if self.method == "dvfl" and self.scheduler != "none":
            raise ValueError("method dvfl trains with constant learning rates (scheduler none)")
        return self
