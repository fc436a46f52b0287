"""The round engine: the coordinator's logic, independent of how parties are reached.

`Federation` holds a run's state (its parties, alignments, liveness, cursor, counters) and
composes the parts that act on it, each a module and a class of its own:

- `Aligner` (vfl_core.training.aligner): PSI or keyed-hash alignment, re-alignment, key resend;
- `TrainRows` (vfl_core.training.train_rows): the validation rows held out, class weights, the
  epoch plan;
- `Presence` (vfl_core.training.liveness): rejoins and pauses;
- `RoundLoop` (vfl_core.training.round_loop) and `LaserRound` (vfl_core.training.laser_round):
  epochs of rounds, checkpoints, and one Embed/Fuse/Backward round;
- `Evaluator` (vfl_core.training.evaluation): prediction and scoring;
- `Validator` (vfl_core.training.validation): early stopping and the validation choice;
- `Snapshots` (vfl_core.training.snapshot): snapshot and restore.

A party that does not answer a phase in time is absent from the transport's result; the engine
then runs the round on the blocks that remain, which is exactly the situation LASER-VFL is built
for. A method's round program sees the engine through vfl_core.methods.federation_port, and
each part sees the run through its protocol in vfl_core.training.ports (none imports this module).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Container, Iterable, Iterator, Sequence
from dataclasses import InitVar, dataclass, field
from typing import Any

import numpy as np

from vfl_core.auto_rounds import check_mixed, resolve
from vfl_core.config import TrainConfig
from vfl_core.data.batch_plan import Alignment, Batch
from vfl_core.data.learning_task import REGRESSION
from vfl_core.errors import ConfigError
from vfl_core.inference.choice import ValidationChoice
from vfl_core.inference.federation_view import Ask
from vfl_core.inference.headline import watched
from vfl_core.inference.metrics import EvalReport
from vfl_core.methods.liveness import Liveness
from vfl_core.methods.outcomes import PredictionBatch, RoundRecord, batch_prediction, well_formed
from vfl_core.methods.spec import MethodSpec, ProgramHooks
from vfl_core.protocol import (
    PartyInfo,
    ServingChoice,
    Transport,
    disagreement,
    mismatch_hint,
)
from vfl_core.training import direct, direct_many, direct_stale
from vfl_core.training.aligner import Aligner
from vfl_core.training.early_stop import EarlyStop
from vfl_core.training.evaluation import Evaluator
from vfl_core.training.laser_round import LaserRound
from vfl_core.training.liveness import Presence
from vfl_core.training.records import Callbacks, Cursor, EpochSummary, Observer, Pause
from vfl_core.training.round_loop import RoundLoop
from vfl_core.training.snapshot import Snapshots
from vfl_core.training.train_rows import TrainRows
from vfl_core.training.validation import Validator

__all__ = [  # with the names callers import from here, now defined in the parts
    "Callbacks",
    "Cursor",
    "EpochSummary",
    "Federation",
    "Observer",
    "Pause",
    "PredictionBatch",
    "RoundRecord",
    "batch_prediction",
    "well_formed",
]

log = logging.getLogger(__name__)


@dataclass
class Federation:
    transport: Transport
    config: TrainConfig
    progress: bool = True
    # a shorthand for observers=[Callbacks(round=on_round)]
    on_round: InitVar[Callable[[RoundRecord], None] | None] = None
    down_after: int = 3
    retry_every: int = 10
    # "hmac": parties' keyed ID hashes; "psi": vfl_core.training.psi (no hashes)
    alignment: str = "hmac"
    # Checkpoints: None = never; 0 = at the end of training; N = also after every N rounds.
    checkpoint_every: int | None = None
    # Seconds training may stay paused while no party that can train (a label party; the active
    # one for split-learning methods) is up: no round is run or counted meanwhile, and
    # FederationDown ends a longer pause. None never pauses: the guest-loss model of injected
    # faults (vfl_core.training.faults), whose rounds pass whoever is up.
    rejoin_timeout_s: float | None = None
    # While paused, seconds between calls to the down parties anyway (a frozen process that was
    # thawed answers again without registering again); vfl_core.training.liveness
    pause_probe_s: float = 5.0
    # Seconds align() keeps asking the parties that hold samples but did not answer (a restarted
    # coordinator's parties may be busy or frozen); one still silent joins at an epoch's start
    # once it is heard from again (`unaligned`).
    align_retry_s: float = 0.0
    unaligned: set[int] = field(init=False, default_factory=set)
    pauses: list[Pause] = field(init=False, default_factory=list)
    # Rounds through vfl_core.training.pipeline (a round's Backward travels with the next Embed;
    # with TrainConfig.staleness, several rounds per call); False: Embed, Fuse, Backward one by
    # one.
    pipeline: bool = True
    cursor: Cursor = field(init=False, default_factory=Cursor)
    last_checkpoint: int = field(init=False, default=-1)
    infos: dict[int, PartyInfo] = field(init=False)
    alignments: dict[str, Alignment] = field(init=False, default_factory=dict)
    liveness: Liveness = field(init=False)
    spec: MethodSpec = field(init=False)  # the method: the engine asks it, never its name
    round_id: int = field(init=False, default=0)
    # every party sends feature vectors (F,), not images (C, H, W): the tabular defaults apply
    tabular: bool = field(init=False, default=False)
    request_id: int = field(init=False, default=0)
    # What a method's round program keeps for this run
    # (vfl_core.methods.spec.ProgramHooks).
    program_state: Any = field(init=False, default=None)
    # With TrainConfig.early_stop_patience: the validation record (vfl_core.training.early_stop).
    early_stop: EarlyStop | None = field(init=False, default=None)
    # What the validation samples chose after training (vfl_core.inference.choice): the parties
    # each observed set is predicted from, the decision threshold.
    choice: ValidationChoice = field(init=False, default_factory=ValidationChoice)
    # --overlap-validation on the direct plane: block -> the round after which its validation
    # call left, which its next round call waits for (vfl_core.training.late_validation)
    validation_turns: dict[int, int] = field(init=False, default_factory=dict)
    # the next epoch's first rounds, sent before this epoch's last ones were back
    # (vfl_core.training.direct_stale.Ahead)
    ahead: Any = field(init=False, default=None)
    # who follows the run (vfl_core.persistence.run_log.RunLog, the coordinator's checkpointer and
    # round log)
    observers: list[Observer[Federation]] = field(default_factory=list)

    def __post_init__(self, on_round: Callable[[RoundRecord], None] | None) -> None:
        if on_round is not None:
            self.observers.append(Callbacks(round=on_round))
        self.infos = self.transport.infos()
        _check_infos(self.infos)
        if self.alignment not in ("hmac", "psi"):
            raise ConfigError(f"alignment must be hmac or psi, not {self.alignment!r}")
        if self.config.balance == "resample" and self.task == REGRESSION:
            raise ConfigError("balance 'resample' balances classes: not for a regression task")
        self.liveness = Liveness(sorted(self.infos), self.down_after, self.retry_every)
        # tabular parties send feature vectors (F,); images (C, H, W)
        self.tabular = all(len(i.feature_shape) == 1 for i in self.infos.values())
        # unset staleness and the like: the tables' rounds or exact ones (vfl_core.auto_rounds),
        # as every party resolves them from its own features
        check_mixed(self.config, [tuple(i.feature_shape) for i in self.infos.values()])
        sequential = None if self.pipeline else "the sequential engine runs one round at a time"
        # fresh_own_tower too, as only the federation knows its label parties (its Embed calls
        # tell the one label party: fresh_own_block)
        labels = len(self.label_blocks)
        self.config = resolve(self.config, self.tabular, sequential, label_parties=labels)
        if self.config.staleness and not self.pipeline:
            raise ConfigError("staleness needs the pipelined engine (pipeline=True)")
        self.spec = self.config.spec_for(self.tabular)
        patience = self.config.patience(self.tabular)
        if patience:
            self.early_stop = EarlyStop(
                patience,
                metric=watched(self.task, self.num_classes),
                min_improvement=self.config.early_stop_min_improvement,
                min_epochs=self.config.min_epochs(),
            )
        # the parts, each acting on this run's state
        self.aligner = Aligner(self)
        self.train_rows = TrainRows(self)
        self.presence = Presence(self)
        self.loop = RoundLoop(self)
        self.laser = LaserRound(self)
        self.evaluator = Evaluator(self)
        self.validator = Validator(self)
        self.snapshots = Snapshots(self)

    # ------------------------------------------------------------------ alignment
    def align(
        self, splits: tuple[str, ...] = ("train", "test"), retry_s: float | None = None
    ) -> None:
        """Align every split with the parties that answer (vfl_core.training.aligner)."""
        self.aligner.align(splits, retry_s)

    def align_again_if_due(self, when: str) -> None:
        """After training (before the test table) and before serving a prediction: parties
        heard from since the last round, and a party the alignment lacks or holds on rows it no
        longer has (it registered late, or again on another data set), aligned again with the
        rest; else it would be left out of the test table, or refuse its old rows."""
        self.presence.poll_rejoins()
        self.aligner.again_if_due(when)

    # ------------------------------------------------------------------ training
    @property
    def hooks(self) -> ProgramHooks | None:
        """The method's round program, if it has one with hooks (stages, plans, state)."""
        program = self.spec.program
        return program if isinstance(program, ProgramHooks) else None

    @property
    def total_epochs(self) -> int:
        """Epochs of the whole run (a round program may add stages after the configured ones;
        a table too small for early stopping's default trains fewer: TrainRows.epoch_limit)."""
        limit = self.train_rows.epoch_limit
        return self.config.total_epochs if limit is None else limit

    def plan(self, epoch: int) -> list[Batch]:
        planned = None if self.hooks is None else self.hooks.plan(self, epoch)
        return self.base_plan(epoch) if planned is None else planned

    def base_plan(self, epoch: int) -> list[Batch]:
        """Every training sample once, in single-pattern batches (vfl_core.training.train_rows)."""
        return self.train_rows.plan(epoch)

    def train(self, start_epoch: int = 0) -> list[EpochSummary]:
        """Train to the last epoch from the cursor (vfl_core.training.round_loop); where nothing
        is held out, the epochs' evaluations predict with the heads the run will serve."""
        self.validator.unvalidated_from_start()
        return self.loop.train(start_epoch)

    def train_epoch(self, epoch: int) -> EpochSummary:
        return self.loop.train_epoch(epoch)

    def checkpoint(self) -> set[int]:
        """The parties save their state after the last round; the observers hear of it."""
        return self.loop.checkpoint()

    def run_round(self, round_id: int, epoch: int, batch: Batch) -> RoundRecord:
        self.presence.poll_rejoins()
        if self.spec.program is not None:  # a method with phases of its own
            return self.spec.program.train_round(self, round_id, epoch, batch)
        if direct.supported(self):  # tensors between the parties, not through the engine
            plane = direct if direct.exact(self) else direct_stale
            return plane.run_one(self, round_id, epoch, batch)
        return self.laser.run(round_id, epoch, batch)

    # ------------------------------------------------------------------ the methods' port
    @property
    def tick(self) -> int:
        """Advances with every training round and every inference batch (liveness clock)."""
        return self.round_id + self.request_id

    def record(
        self,
        expected: Iterable[int],
        got: Container[int],
        phase: str,
        where: str,
        immediate: bool = False,
        tick: int | None = None,
    ) -> None:
        """Who of `expected` answered `phase`, into the liveness (a miss logged)."""
        tick = self.tick if tick is None else tick
        for b in expected:
            if b in got:
                self.liveness.answered(b, tick)
            else:
                log.info("%s: block %d missed %s", where, b, phase)
                self.liveness.failed(b, tick, phase, immediate)

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
    ) -> dict[int, np.ndarray]:
        """The well-formed embeddings of `answers` (`own`: the block that answers no rows,
        fresh_own_block); who answered recorded."""
        return self.laser.accept(answers, callees, size, phase, where, immediate, tick, own)

    def inference_embeddings(
        self, split: str, batch: Batch, request: int, blocks: Collection[int] | None
    ) -> tuple[dict[int, np.ndarray], tuple[int, ...]]:
        """An inference batch's embeddings from the live parties (of `blocks`), and who was
        called."""
        return self.evaluator.inference_embeddings(split, batch, request, blocks)

    # ------------------------------------------------------------------ inference
    def predict_batches(
        self,
        split: str = "test",
        index: np.ndarray | None = None,
        blocks: Collection[int] | None = None,
    ) -> Iterator[PredictionBatch]:
        """Predict every sample of `split` (or the given key indices) from the live parties, or
        only from those of `blocks` (vfl_core.training.evaluation)."""
        return self.evaluator.predict_batches(split, index, blocks)

    def eval_rng(self, batch: Batch) -> np.random.Generator:
        """The random draws of an inference batch, keyed by its samples."""
        return self.evaluator.eval_rng(batch)

    def evaluate(
        self,
        split: str = "test",
        blocks: Collection[int] | None = None,
        index: np.ndarray | None = None,
        federation_scores: bool = False,
        head: str | None = None,
    ) -> EvalReport:
        """Metrics of `split` (or of its key indices `index`) by observed set, from every live
        party or only those of `blocks`, with the heads `head` names (None: those the validation
        chose; vfl_core.training.evaluation)."""
        return self.evaluator.evaluate(split, blocks, index, federation_scores, head)

    def evaluate_many(self, asks: Sequence[Ask]) -> list[EvalReport]:
        """The reports of independent evaluations, in order, each as `evaluate` would make it
        in turn; on the direct plane several go out in one fan-out
        (vfl_core.training.direct_many)."""
        return direct_many.evaluate_many(
            self,
            asks,
            lambda a: self.evaluate(a.split, a.blocks, a.index, a.federation_scores, a.head),
        )

    def method_stats(self) -> dict[str, object] | None:
        """What a round program reports of its run (results.json), if the method has one."""
        return None if self.hooks is None else self.hooks.stats(self)

    # ------------------------------------------------------------------ validation
    def choose_on_validation(self) -> ValidationChoice:
        """After training: the subsets and the threshold the validation samples choose
        (vfl_core.training.validation)."""
        return self.validator.choose()

    @property
    def threshold(self) -> float | None:
        """The decision threshold of binary predictions (None: the plain argmax)."""
        return self.validator.threshold()

    def serving_choice(self) -> ServingChoice:
        """How this federation decides (threshold, subsets), for the serving bundles."""
        return ServingChoice(self.threshold, dict(self.choice.subsets), dict(self.choice.heads))

    @property
    def _training(self) -> np.ndarray | None:
        return self.train_rows.training

    @property
    def _validation(self) -> np.ndarray | None:
        return self.train_rows.validation

    @property
    def _weights(self) -> np.ndarray | None:
        return self.train_rows.weights

    # ------------------------------------------------------------------ snapshot and resume
    def snapshot(self) -> dict[str, object]:
        """Where the run stands, as plain data (vfl_core.training.snapshot)."""
        return self.snapshots.take()

    def restore(self, saved: dict, present: Iterable[int] = ()) -> None:
        """Continue (already aligned) from a `snapshot()`; parties in `present` that it had
        marked down registered again since: they are rejoining."""
        self.snapshots.restore(saved, present)

    # ------------------------------------------------------------------ federation facts
    @property
    def label_blocks(self) -> tuple[int, ...]:
        return tuple(sorted(b for b, i in self.infos.items() if i.has_labels))

    @property
    def fresh_own_block(self) -> int | None:
        """The label party whose training Embed calls say fresh_own (TrainConfig.fresh_own_tower
        in effect: resolved on, under staleness, one label party); None: no party's."""
        c, labels = self.config, self.label_blocks
        return labels[0] if c.fresh_own_tower and c.staleness and len(labels) == 1 else None

    @property
    def num_blocks(self) -> int:
        return next(iter(self.infos.values())).num_blocks

    @property
    def num_classes(self) -> int:
        return next(iter(self.infos.values())).num_classes

    @property
    def task(self) -> str:
        return next(iter(self.infos.values())).task


def _check_infos(infos: dict[int, PartyInfo]) -> None:
    if not infos:
        raise ConfigError("no parties")
    found = disagreement(list(infos.values()))
    if found is not None:
        name, first, info = found
        raise ConfigError(
            f"parties disagree on {name}: {info.party_id} has {getattr(info, name)!r}, "
            f"{first.party_id} has {getattr(first, name)!r}" + mismatch_hint(name, info, first)
        )
    first = next(iter(infos.values()))
    for block, info in infos.items():
        if info.block != block or not 0 <= block < first.num_blocks:
            raise ConfigError(
                f"party {info.party_id}: block {info.block} outside 0..{first.num_blocks - 1}"
            )
    if not any(i.has_labels for i in infos.values()):
        raise ConfigError("no party holds labels: nothing to train")
