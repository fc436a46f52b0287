"""The messages of Decoupled VFL (vfl_core.methods.dvfl.nets), independent of any transport.

Every message goes one way down the tiers: a guest's activations to the coordinator, which writes
them into each host's registers; a host's outputs to the coordinator, which feeds them to the
label owner. Nothing travels back up: no gradient, no label, nothing a guest receives. Inference
reuses the Embed (a guest's activations) and Predict (the owner, on the hosts' outputs) calls of
`vfl_core.protocol`. Arrays are CPU numpy: float32 activations and outputs, int64 rows/indices.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class GuestCall:
    """One local autoencoder step of a guest on its rows of the round's batch; with `write` (a
    communication round) it also returns its activations of those rows, for the hosts."""

    round_id: int
    epoch: int
    rows: np.ndarray  # (B,) int64, the guest's own train rows
    digest: bytes  # as in EmbedCall
    write: bool


@dataclass(frozen=True)
class GuestResult:
    loss: float  # the reconstruction loss of the step
    activations: np.ndarray | None = None  # (B, guest_dim) float32 when the call said write


@dataclass(frozen=True)
class HostCall:
    """Write guests' activations into a host's registers, then replay `steps` batches."""

    round_id: int
    epoch: int
    samples: int  # number of training samples (registers per guest), fixed for the run
    index: np.ndarray  # (B,) int64 key indices of the written samples (empty: nothing written)
    writes: dict[int, np.ndarray] = field(default_factory=dict)  # guest -> (B, guest_dim)
    steps: int = 1


@dataclass(frozen=True)
class HostResult:
    loss: float  # mean reconstruction loss over the replay steps (nan: nothing to replay yet)
    replayed: int  # replay steps taken


@dataclass(frozen=True)
class HostOutputCall:
    """A host's output (its encoder's code) for B samples: of its registers (`from_registers`,
    training samples, for the owner) or of the given guests' fresh activations (inference; an
    absent guest counts as zeros)."""

    request_id: int
    split: str
    index: np.ndarray  # (B,) int64 key indices of the split's alignment
    from_registers: bool
    activations: dict[int, np.ndarray] = field(default_factory=dict)  # guest -> (B, guest_dim)


@dataclass(frozen=True)
class OwnerFeedCall:
    """The frozen hosts' outputs for B of the owner's training rows; it keeps those it has labels
    for (an absent host counts as zeros)."""

    round_id: int
    rows: np.ndarray  # (B,) int64, the owner's own train rows
    digest: bytes
    outputs: dict[int, np.ndarray]  # host -> (B, host_dim)


@dataclass(frozen=True)
class OwnerTrainCall:
    """One epoch of the owner's classifier over the labelled rows it was fed."""

    round_id: int
    epoch: int  # the owner's epoch, 0-based (seeds its batch order)
