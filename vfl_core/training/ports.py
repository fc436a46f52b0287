"""What each part of the round engine uses of the run: small protocols that
vfl_core.training.engine.Federation satisfies, so that no part imports the engine.

`Run` is the run's state and facts (what every part reads; a method's round program sees a part
of it, vfl_core.methods.federation_port); each part's own protocol adds the few things it asks of
the run or of a sibling part, and a sibling part appears as the narrow protocol of what is used
of it (`Rejoins` of Presence, `Realigner` of Aligner, ...). The engine imports the parts, the
parts import this module, and this module imports neither.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from vfl_core.methods.federation_port import FederationPort

if TYPE_CHECKING:
    from vfl_core.config import TrainConfig
    from vfl_core.data.batch_plan import Batch
    from vfl_core.inference.choice import ValidationChoice
    from vfl_core.inference.metrics import EvalReport
    from vfl_core.methods.outcomes import RoundRecord
    from vfl_core.methods.spec import MethodSpec, ProgramHooks
    from vfl_core.protocol import FuseCall, FuseResult, PartyInfo
    from vfl_core.training.early_stop import EarlyStop
    from vfl_core.training.records import Cursor, EpochSummary, Observer, Pause


class Run(FederationPort, Protocol):
    """The run's state and facts: what every part reads (and the counters it advances)."""

    config: TrainConfig
    cursor: Cursor
    early_stop: EarlyStop | None
    choice: ValidationChoice
    round_id: int
    request_id: int
    unaligned: set[int]
    alignment: str  # "hmac" or "psi"
    rejoin_timeout_s: float | None
    validation_turns: dict[int, int]  # (vfl_core.training.late_validation)
    ahead: Any  # (vfl_core.training.direct_stale.Ahead)

    @property
    def spec(self) -> MethodSpec: ...
    @property
    def hooks(self) -> ProgramHooks | None: ...
    @property
    def total_epochs(self) -> int: ...
    @property
    def fresh_own_block(self) -> int | None: ...


# ---------------------------------------------------------------- the parts, as siblings see them
class Rejoins(Protocol):
    """Presence (vfl_core.training.liveness) as the other parts call it."""

    def poll_rejoins(self, tick: int | None = None) -> None: ...
    def call_again(self, block: int, tick: int) -> None: ...


class Pacing(Rejoins, Protocol):
    """Presence as the round loop runs rounds through it (pauses while no head party is up)."""

    def pause_due(self) -> bool: ...
    def round_when_up(self, epoch: int, batch: Batch) -> RoundRecord: ...


class Realigner(Protocol):
    """Aligner (vfl_core.training.aligner) as Presence and the round loop use it."""

    due: bool
    other_rows: set[int]

    def holds_other_rows(self, block: int, info: PartyInfo | None) -> bool: ...
    def resend_psi_keys(self, block: int) -> None: ...
    def again_if_due(self, when: str | None = None) -> None: ...


class HeldOut(Protocol):
    """TrainRows (vfl_core.training.train_rows) as the aligner and the validator use it."""

    validation: np.ndarray | None
    weights: np.ndarray | None

    def hold_out(self) -> None: ...
    def class_weights(self) -> np.ndarray: ...


class Fusing(Protocol):
    """LaserRound (vfl_core.training.laser_round) as the other round paths and inference use it."""

    def fuse_calls(
        self,
        round_id: int,
        epoch: int,
        embeddings: dict[int, np.ndarray],
        callees: tuple[int, ...],
        batch: Batch,
        holders: tuple[int, ...],
    ) -> dict[int, FuseCall]: ...

    def fused(
        self,
        calls: dict[int, FuseCall],
        fused: dict[int, FuseResult],
        callees: tuple[int, ...],
        size: int,
        where: str,
        tick: int | None = None,
    ) -> dict[int, FuseResult]: ...

    def accept(
        self,
        answers: dict[int, np.ndarray],
        callees: tuple[int, ...],
        size: int,
        phase: str,
        where: str,
        immediate: bool = False,
        tick: int | None = None,
        own: int | None = None,
    ) -> dict[int, np.ndarray]: ...


class Choosing(Protocol):
    """Validator (vfl_core.training.validation) as the round loop and the evaluator use it."""

    def stop_early(self) -> bool: ...
    # turns: direct_eval.Turns, returns direct_eval.Started | None (Any, as `Run.ahead`: this
    # module naming direct_eval would close an import circle, direct_eval naming EvaluatorRun)
    def begin_epoch_end(self, epoch: int, last_round: int, turns: Any) -> Any: ...
    def flows(self) -> bool: ...
    def restore_best(self) -> bool: ...
    def threshold(self) -> float | None: ...
    def served(
        self, pattern: tuple[int, ...], blocks: Collection[int] | None
    ) -> tuple[Collection[int] | None, tuple[int, ...]]: ...
    def head(self, pattern: tuple[int, ...], blocks: Collection[int] | None) -> str: ...


class EpochEnd(Protocol):
    """RoundLoop (vfl_core.training.round_loop) as the snapshots use it."""

    def end_epoch(self, epoch: int, rounds: int, seconds: float) -> EpochSummary: ...


# ---------------------------------------------------------------- each part's view of the run
class AlignerRun(Run, Protocol):
    align_retry_s: float
    presence: Rejoins
    train_rows: HeldOut

    def align(self, splits: tuple[str, ...] = ..., retry_s: float | None = None) -> None: ...


class RowsRun(Run, Protocol):
    tabular: bool


class PresenceRun(Run, Protocol):
    aligner: Realigner
    pauses: list[Pause]

    def run_round(self, round_id: int, epoch: int, batch: Batch) -> RoundRecord: ...


class RoundRun(Run, Protocol):
    """A training round's view (LaserRound's siblings: vfl_core.training.direct and .pipeline)."""

    laser: Fusing
    presence: Rejoins


class LoopRun(RoundRun, Protocol):
    aligner: Realigner
    presence: Pacing  # (a Rejoins)
    validator: Choosing
    checkpoint_every: int | None
    last_checkpoint: int
    observers: list[Observer[Any]]
    pipeline: bool
    progress: bool

    def plan(self, epoch: int) -> list[Batch]: ...
    def choose_on_validation(self) -> ValidationChoice: ...


class EvaluatorRun(Run, Protocol):
    laser: Fusing
    presence: Rejoins
    validator: Choosing


class ValidatorRun(Run, Protocol):
    train_rows: HeldOut

    def align_again_if_due(self, when: str) -> None: ...
    def evaluate(
        self,
        split: str = ...,
        blocks: Collection[int] | None = None,
        index: np.ndarray | None = None,
        federation_scores: bool = False,
        head: str | None = None,
    ) -> EvalReport: ...


class SnapshotRun(Run, Protocol):
    last_checkpoint: int
    pauses: list[Pause]
    loop: EpochEnd

    def plan(self, epoch: int) -> list[Batch]: ...


__all__ = [
    "AlignerRun",
    "Choosing",
    "EpochEnd",
    "EvaluatorRun",
    "Fusing",
    "HeldOut",
    "LoopRun",
    "Pacing",
    "PresenceRun",
    "Realigner",
    "Rejoins",
    "RoundRun",
    "RowsRun",
    "Run",
    "SnapshotRun",
    "ValidatorRun",
]
