"""What the round engine keeps of a run as it goes, and who hears of it: the cursor (where
training stands), each epoch's summary, the pauses, and the observers that follow the rounds.

A round's own record (`RoundRecord`) is the methods layer's (vfl_core.methods.outcomes): a
method's round program builds it too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from vfl_core.methods.outcomes import RoundRecord

if TYPE_CHECKING:
    from vfl_core.training.engine import Federation


@dataclass(frozen=True)
class Pause:
    """Training stood still at `round_id` for `seconds` because no party that can train was up."""

    round_id: int
    epoch: int
    seconds: float
    resumed: bool  # False: nobody came back within the rejoin timeout and the run stopped


@dataclass(frozen=True)
class EpochSummary:
    epoch: int
    rounds: int
    mean_loss: float
    seconds: float
    incomplete_rounds: int  # rounds where some block of the pattern was absent
    head_losses: dict[int, float] = field(default_factory=dict)  # head block -> its mean loss
    # rounds that called parties (a batch no label party can train on calls nobody: it crosses
    # no network), and the process CPU seconds of the epoch's rounds (in process: every party's;
    # over gRPC: the coordinator's). A resumed epoch counts from where it resumed.
    trained_rounds: int = 0
    cpu_seconds: float = 0.0


def saved_summary(saved: dict) -> EpochSummary:
    """An EpochSummary from its checkpointed dict (head blocks are string keys there)."""
    heads = {int(k): float(v) for k, v in saved.get("head_losses", {}).items()}
    return EpochSummary(**{**saved, "head_losses": heads})


@dataclass
class Cursor:
    """Where training stands (with the round and request counters, what a coordinator checkpoint
    holds): the epoch, how many batches of its plan have run, and the epoch's figures so far."""

    epoch: int = 0
    position: int = 0  # batches of the epoch's plan already run
    losses: list[float] = field(default_factory=list)  # head losses of the epoch so far
    head_losses: dict[int, list[float]] = field(default_factory=dict)  # the same, by head
    incomplete: int = 0
    seconds: float = 0.0  # time spent in the epoch so far
    trained: int = 0  # rounds of the epoch so far that called parties (not checkpointed)
    cpu_seconds: float = 0.0  # process CPU time of the epoch so far (not checkpointed)
    summaries: list[EpochSummary] = field(default_factory=list)  # finished epochs


class Observer:
    """Follows a run (the run log, the coordinator's checkpointer and round log): the engine
    calls every observer of its list, in order, after each round, epoch and checkpoint. Nothing
    outside the engine writes its fields."""

    def round_done(self, fed: Federation, record: RoundRecord) -> None:
        """After each training round, in round order."""

    def epoch_done(self, fed: Federation, summary: EpochSummary) -> None:
        """After each finished epoch (a resumed run's cut epoch included)."""

    def checkpoint_done(self, fed: Federation, round_id: int, saved: set[int]) -> None:
        """After the parties saved their state after `round_id` (`saved`: those that did)."""


@dataclass
class Callbacks(Observer):
    """An observer made of plain functions (tests and scripts that record rounds)."""

    round: Callable[[RoundRecord], None] | None = None
    epoch: Callable[[EpochSummary], None] | None = None
    checkpoint: Callable[[int, set[int]], None] | None = None

    def round_done(self, fed: Federation, record: RoundRecord) -> None:
        if self.round is not None:
            self.round(record)

    def epoch_done(self, fed: Federation, summary: EpochSummary) -> None:
        if self.epoch is not None:
            self.epoch(summary)

    def checkpoint_done(self, fed: Federation, round_id: int, saved: set[int]) -> None:
        if self.checkpoint is not None:
            self.checkpoint(round_id, saved)
