"""Decoupled VFL's own settings (part of TrainConfig; torch-free so configs load fast)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class DvflConfig(BaseModel):
    """Decoupled VFL (vfl_core.methods.dvfl.nets): the three tiers' sizes and the schedule. The
    defaults are the DVFL paper's MNIST setup (guest 196-100-80, host 4x80-200-160, owner
    4x160-160-40-10). Guests and hosts use the run's optimiser, lr and weight decay; the owner
    plain SGD."""

    model_config = ConfigDict(frozen=True, extra="forbid")

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
    # Early stopping of the owner (the paper's limited-label runs): 0 off; N: stop after N owner
    # epochs without a better accuracy on `owner_validation` of its labelled rows, best restored.
    owner_patience: int = Field(0, ge=0)
    owner_validation: float = Field(0.2, gt=0, lt=1)
    # With early stopping: the owner trains at least this many epochs, and the best epoch is
    # chosen from this one on (0: from the first).
    owner_min_epochs: int = Field(0, ge=0)
    # The communication period in guest epochs (the paper's Fig. 3/4): the guests write in every
    # N-th epoch (all its rounds) and not in the others; None: `period` (rounds) decides.
    period_epochs: int | None = Field(None, ge=1, le=100_000)

    @field_validator("guest_hidden", "host_hidden", "owner_hidden")
    @classmethod
    def _positive(cls, sizes: tuple[int, ...]) -> tuple[int, ...]:
        if any(s < 1 or s > 65536 for s in sizes):
            raise ValueError(f"layer sizes must be in 1..65536, got {list(sizes)}")
        return sizes

    @model_validator(mode="after")
    def _min_within_epochs(self) -> DvflConfig:
        if self.owner_min_epochs > self.owner_epochs:
            raise ValueError(
                f"owner_min_epochs ({self.owner_min_epochs}) exceeds owner_epochs "
                f"({self.owner_epochs})"
            )
        return self
