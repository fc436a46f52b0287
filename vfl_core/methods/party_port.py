"""What a method's party side may use of the party it runs in: the shared part of a party
(vfl_core.training.party.Party satisfies it), as a Protocol in the methods layer, so that the
methods need not import the training layer above them.

It holds what every method shares: the party's identity and configuration, its data and
splits, rows checked against their digest, targets and loss, the model bank's optimisers, its
random streams, the round counter, and the wire's float32 arrays in and out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np
    import torch

    from vfl_core.data.learning_task import TargetScaler
    from vfl_core.data.party_dir import PartyData, PartySplit
    from vfl_core.methods.spec import MethodSpec, RunConfig
    from vfl_core.model.model_bank import ModelBank
    from vfl_core.privacy.guards import PartyGuard
    from vfl_core.protocol import BackwardCall, EmbedCall, FuseCall, FuseResult
    from vfl_core.seeding import Stream


class PartyPort(Protocol):
    party_id: str
    config: RunConfig  # resolved (vfl_core.auto_rounds), what its calls said recorded
    told: RunConfig  # as the federation told it
    guard: PartyGuard  # the label-leak defences it applies (vfl_core.privacy)
    spec: MethodSpec
    data: PartyData
    device: torch.device
    block: int
    task: str
    scaler: TargetScaler
    loss_fn: Any  # (output, target) -> scalar loss tensor
    models: ModelBank  # the spec's slots and heads, with their optimisers
    last_round: int  # the latest training round the party took part in

    @property
    def dvfl(self) -> Any:
        """The party's DVFL tiers, when it trains dvfl (else None)."""

    @property
    def dlvm(self) -> Any:
        """The party's latent-variable VFL networks, when it trains dlvm (else None)."""

    def split(self, split: str) -> PartySplit: ...

    def check_digest(self, split: str, rows: np.ndarray, digest: bytes) -> None: ...

    def batch(self, split: str, rows: np.ndarray, digest: bytes) -> torch.Tensor: ...

    def targets(self, rows: np.ndarray) -> torch.Tensor: ...

    def stream(self, stream: Stream, *parts: int) -> np.random.Generator: ...

    def from_wire(self, array: np.ndarray, what: str, batch: int, width: int) -> torch.Tensor: ...

    def to_wire(self, t: torch.Tensor) -> np.ndarray: ...

    # The party's own entry points of the shared steps (a pipelined call goes through them).
    def embed(self, call: EmbedCall) -> np.ndarray: ...

    def fuse(self, call: FuseCall) -> FuseResult: ...

    def backward(self, call: BackwardCall) -> None: ...
