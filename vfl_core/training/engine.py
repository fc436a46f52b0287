"""The round engine: the coordinator's logic, independent of how parties are reached.

It aligns samples, plans batches from the shared seed, and runs LASER-VFL rounds (Embed, Fuse,
Backward) and inference through a `Transport`. A party that does not answer a phase in time is
absent from the transport's result; the engine then runs the round on the blocks that remain,
which is exactly the situation LASER-VFL is built for.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Container, Iterable, Iterator, Sequence
from dataclasses import InitVar, asdict, dataclass, field, replace
from typing import Any

import numpy as np
from tqdm import tqdm

from vfl_core.algorithms.method_spec import MethodSpec, ProgramHooks, active_party
from vfl_core.config import AUTO_MIN_VALIDATION, THRESHOLD_RULES, TrainConfig
from vfl_core.data.learning_task import REGRESSION
from vfl_core.errors import ConfigError
from vfl_core.inference.choice import (
    THRESHOLD_METRIC,
    ValidationChoice,
    choose_subsets,
    choose_threshold,
)
from vfl_core.inference.metrics import FEDERATION, EvalReport
from vfl_core.inference.predictions import Combined, combine, random_guess
from vfl_core.inference.scoring import result_fits
from vfl_core.protocol import (
    BackwardCall,
    EmbedCall,
    FuseCall,
    FuseResult,
    PartyInfo,
    PredictCall,
    PsiCall,
    SamplePrediction,
    ScoreCall,
    ScoreResult,
    Transport,
    disagreement,
    mismatch_hint,
)
from vfl_core.seeding import Stream, rng
from vfl_core.training import pipeline, psi
from vfl_core.training.alignment import Alignment, Batch, epoch_plan, eval_plan, key_list_fault
from vfl_core.training.early_stop import EarlyStop, hold_out, watched
from vfl_core.training.liveness import DOWN, FederationDown, Liveness
from vfl_core.training.retry import Backoff, retry_until

log = logging.getLogger(__name__)

# While training is paused (no party that can train is up), how often the engine looks for
# parties that registered again, and how often it calls the down ones anyway: a frozen process
# that was thawed answers again without registering again.
PAUSE_POLL_S = 0.2
PAUSE_PROBE_S = 5.0
ALIGN_RETRY_PAUSE_S = 2.0  # between attempts to align a party that did not answer


@dataclass(frozen=True)
class Pause:
    """Training stood still at `round_id` for `seconds` because no party that can train was up."""

    round_id: int
    epoch: int
    seconds: float
    resumed: bool  # False: nobody came back within the rejoin timeout and the run stopped


@dataclass(frozen=True)
class RoundRecord:
    round_id: int
    epoch: int
    pattern: tuple[int, ...]  # the batch's observed set
    present: tuple[int, ...]  # blocks whose embeddings were used
    losses: dict[int, float]  # head block -> sampled loss L_k
    updated: tuple[int, ...]  # blocks that acknowledged Backward

    def to_json(self) -> dict[str, object]:
        """The round as the coordinator logs it (one line of rounds.jsonl)."""
        return {
            "round": self.round_id,
            "epoch": self.epoch,
            "pattern": list(self.pattern),
            "present": list(self.present),
            "losses": {str(k): v for k, v in self.losses.items()},
            "updated": list(self.updated),
        }


@dataclass(frozen=True)
class EpochSummary:
    epoch: int
    rounds: int
    mean_loss: float
    seconds: float
    incomplete_rounds: int  # rounds where some block of the pattern was absent
    head_losses: dict[int, float] = field(default_factory=dict)  # head block -> its mean loss


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
    summaries: list[EpochSummary] = field(default_factory=list)  # finished epochs


@dataclass(frozen=True)
class PredictionBatch:
    index: np.ndarray  # key indices into the split's alignment, (B,)
    pattern: tuple[int, ...]  # blocks holding these samples
    present: tuple[int, ...]  # blocks whose embeddings were used (the observed set O')
    party_probs: dict[int, np.ndarray]  # head block -> (B, C); regression (B, 1) values
    federation: np.ndarray | None  # (B, C), mean of the heads' probabilities (None: no head)
    predicted: np.ndarray | None = None  # (B,) the federation's class (regression: value)
    scored: dict[str, np.ndarray] = field(default_factory=dict)  # predictor -> (B,) classes
    scores: dict[str, np.ndarray] = field(default_factory=dict)  # binary: positive-class prob.
    regression: bool = False
    # parties of the pattern that the validation choice leaves out (vfl_core.inference.choice)
    dropped: tuple[int, ...] = ()

    def samples(self, keys: Sequence[bytes]) -> list[SamplePrediction]:
        """One SamplePrediction per sample of the batch."""
        out = []
        for j, i in enumerate(self.index):
            fed = None if self.federation is None else self.federation[j]
            value = None if self.predicted is None else self.predicted[j]
            out.append(
                SamplePrediction(
                    id_hash=keys[int(i)],
                    observed=self.present,
                    party_probs={b: p[j] for b, p in self.party_probs.items()},
                    federation=fed,
                    predicted_class=-1 if value is None or self.regression else int(value),
                    predicted_value=float(value) if value is not None and self.regression else None,
                )
            )
        return out


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


@dataclass
class Federation:
    transport: Transport
    config: TrainConfig
    progress: bool = True
    # a shorthand for observers=[Callbacks(round=on_round)]
    on_round: InitVar[Callable[[RoundRecord], None] | None] = None
    down_after: int = 3
    retry_every: int = 10
    alignment: str = (
        "hmac"  # "hmac": parties' keyed ID hashes; "psi": vfl_core.training.psi (no hashes)
    )
    # Checkpoints: None = never; 0 = at the end of training; N = also after every N rounds.
    checkpoint_every: int | None = None
    # Seconds training may stay paused while no party that can train (a label party; the active
    # one for split-learning methods) is up: no round is run or counted meanwhile, and
    # FederationDown ends a longer pause. None never pauses: the guest-loss model of injected
    # faults (vfl_core.training.faults), whose rounds pass whoever is up.
    rejoin_timeout_s: float | None = None
    # Seconds align() keeps asking the parties that hold samples but did not answer (a restarted
    # coordinator's parties may be busy or frozen); one still silent joins at an epoch's start
    # once it is heard from again (`unaligned`).
    align_retry_s: float = 0.0
    unaligned: set[int] = field(init=False, default_factory=set)
    _realign_due: bool = field(init=False, default=False)
    # blocks that registered again holding other rows: not called until aligned again
    # (_align_again_if_due)
    _other_rows: set[int] = field(init=False, default_factory=set)
    pauses: list[Pause] = field(init=False, default_factory=list)
    _paused_since: float | None = field(init=False, default=None)
    # Rounds through vfl_core.training.pipeline (a round's Backward travels with the next Embed;
    # with
    # TrainConfig.staleness, several rounds per call); False: Embed, Fuse, Backward one by one.
    pipeline: bool = True
    cursor: Cursor = field(init=False, default_factory=Cursor)
    last_checkpoint: int = field(init=False, default=-1)
    infos: dict[int, PartyInfo] = field(init=False)
    alignments: dict[str, Alignment] = field(init=False, default_factory=dict)
    liveness: Liveness = field(init=False)
    spec: MethodSpec = field(init=False)  # the method: the engine asks it, never its name
    round_id: int = field(init=False, default=0)
    request_id: int = field(init=False, default=0)
    _weights: np.ndarray | None = field(init=False, default=None)
    # What a method's round program keeps for this run
    # (vfl_core.algorithms.method_spec.ProgramHooks).
    program_state: Any = field(init=False, default=None)
    # With TrainConfig.early_stop_patience: the validation record, and the train alignment's
    # key indices that train and that are held out for validation (vfl_core.training.early_stop).
    early_stop: EarlyStop | None = field(init=False, default=None)
    _training: np.ndarray | None = field(init=False, default=None)
    _validation: np.ndarray | None = field(init=False, default=None)
    # What the validation samples chose after training (vfl_core.inference.choice): the parties
    # each observed set is predicted from, the decision threshold.
    choice: ValidationChoice = field(init=False, default_factory=ValidationChoice)
    # who follows the run (vfl_core.persistence.run_log.RunLog, the coordinator's checkpointer and
    # round log)
    observers: list[Observer] = field(default_factory=list)

    def __post_init__(self, on_round: Callable[[RoundRecord], None] | None) -> None:
        if on_round is not None:
            self.observers.append(Callbacks(round=on_round))
        self.infos = self.transport.infos()
        _check_infos(self.infos)
        self.spec = self.config.spec
        if self.alignment not in ("hmac", "psi"):
            raise ConfigError(f"alignment must be hmac or psi, not {self.alignment!r}")
        if self.config.balance == "resample" and self.task == REGRESSION:
            raise ConfigError("balance 'resample' balances classes: not for a regression task")
        if self.config.staleness and not self.pipeline:
            raise ConfigError("staleness needs the pipelined engine (pipeline=True)")
        self.liveness = Liveness(sorted(self.infos), self.down_after, self.retry_every)
        # tabular parties send feature vectors (F,); images (C, H, W)
        tabular = all(len(i.feature_shape) == 1 for i in self.infos.values())
        patience = self.config.patience(tabular)
        if patience:
            self.early_stop = EarlyStop(patience, metric=watched(self.task, self.num_classes))

    # ------------------------------------------------------------------ alignment
    def align(
        self, splits: tuple[str, ...] = ("train", "test"), retry_s: float | None = None
    ) -> None:
        """Align every split with the parties that answer, asking those that do not again for
        `retry_s` (None: `align_retry_s`); the ones still missing from a split are `unaligned`
        (they join later)."""
        give_up = time.monotonic() + (self.align_retry_s if retry_s is None else retry_s)
        for split in splits:
            missing = self._align_asking_again(split, give_up)
            if missing:
                log.warning(
                    "aligned %s without blocks %s: each joins once it is heard from again, at "
                    "an epoch's start (after training: before the test table or a prediction)",
                    split,
                    missing,
                )
        self.unaligned = {b for split in self.alignments for b in self._missing(split)}
        self._realign_due = False
        if self.early_stop is not None and "train" in splits and "train" in self.alignments:
            self._hold_out()
        if self.config.balance == "resample":
            self._weights = self._class_weights()

    def _align_asking_again(self, split: str, give_up: float) -> list[int]:
        """Align `split`, asking again every ALIGN_RETRY_PAUSE_S while some block that holds
        samples does not answer, until monotonic time `give_up`; returns those still missing."""
        return retry_until(
            lambda: self._align_split(split),
            bool,  # some block did not answer
            give_up,
            Backoff(ALIGN_RETRY_PAUSE_S),
            lambda missing, pause: log.warning(
                "aligned %s without blocks %s (no answer): asking again in %.0fs",
                split,
                missing,
                pause,
            ),
        )

    def _align_split(self, split: str) -> list[int]:
        """Align `split` with the registered parties that hold it; returns those that did not
        take part."""
        self.infos = self.transport.infos()
        blocks = [b for b, i in self.infos.items() if i.samples.get(split, 0) > 0]
        if not blocks:
            return []
        if self.alignment == "psi":
            keys = psi.psi_align(self.transport, split, blocks)
            self.alignments[split] = Alignment.build(self._sound(split, keys), order="rows")
        else:
            hashes = self.transport.id_hashes(split, blocks)
            self.alignments[split] = Alignment.build(self._sound(split, hashes))
        self.alignments[split] = self.alignments[split].with_label_only(self._feature_rows(split))
        groups = self.alignments[split].patterns()
        log.info(
            "aligned %s: %d samples in %d observed patterns",
            split,
            len(self.alignments[split]),
            len(groups),
        )
        for block in self.alignments[split].unshared():
            log.warning(
                "aligned %s: block %d (%s) shares none of its %d samples with another party: "
                "are the sample IDs written alike at every party (leading zeros, case, spaces, "
                "prefixes)? IDs match only as written; nothing of this block is federated",
                split,
                block,
                self.infos[block].party_id,
                int((self.alignments[split].rows[block] >= 0).sum()),
            )
        return self._missing(split)

    def _sound(self, split: str, keys: dict[int, list[bytes]]) -> dict[int, list[bytes]]:
        """The blocks' key lists that fit the rows they registered; a party's list that does
        not (a bug, or a party out to break the alignment) leaves that party out, as if it had
        not answered, instead of stopping the run."""
        sound = {}
        for block, block_keys in sorted(keys.items()):
            info = self.infos[block]
            fault = key_list_fault(block_keys, info.samples.get(split, 0))
            if fault is None:
                sound[block] = block_keys
                continue
            log.warning(
                "aligned %s without block %d (%s): its sample keys are refused (%s)",
                split,
                block,
                info.party_id,
                fault,
            )
        return sound

    def _missing(self, split: str) -> list[int]:
        """Registered blocks that hold samples of `split` but are not in its alignment."""
        al = self.alignments.get(split)
        held = [b for b, i in sorted(self.infos.items()) if i.samples.get(split, 0) > 0]
        return [b for b in held if al is None or b not in al.rows]

    def align_again_if_due(self, when: str) -> None:
        """After training (before the test table) and before serving a prediction: parties
        heard from since the last round, and a party the alignment lacks or holds on rows it no
        longer has (it registered late, or again on another data set), aligned again with the
        rest; else it would be left out of the test table, or refuse its old rows."""
        self._poll_rejoins()
        self._align_again_if_due(when)

    def _align_again_if_due(self, when: str | None = None) -> None:
        """At an epoch's start (`when` None): a party missing from the alignment was heard from
        again (it registered again, or registered late), so align again with it. The plan of
        this and later epochs includes it; the epochs before keep theirs. Elsewhere (`when`)
        a party that does not answer is not waited for: it is down, and nothing trains."""
        if not self._realign_due or (when is None and self.cursor.position):
            return
        before = set(self.alignments["train"].rows) if "train" in self.alignments else set()
        self.align(retry_s=None if when is None else 0.0)
        # not called since they came back on other rows (and down, if they were): call them
        renewed = sorted(self._other_rows & set(self.alignments["train"].rows))
        for block in renewed:
            self._call_again(block, self._tick)
        self._other_rows.clear()
        log.warning(
            "%s: aligned again; blocks %s joined, %s on their new rows, %s still missing",
            when or f"epoch {self.cursor.epoch + 1}",
            sorted(set(self.alignments["train"].rows) - before),
            renewed,
            sorted(self.unaligned),
        )

    def _feature_rows(self, split: str) -> dict[int, int]:
        """block -> rows of `split` with features, for the parties that also hold label-only
        rows (after those)."""
        return {
            b: i.samples.get(split, 0) - i.label_only[split]
            for b, i in self.infos.items()
            if i.label_only.get(split, 0) > 0
        }

    def _hold_out(self) -> None:
        """Hold out the validation samples (of those a label party holds) from the plan; by
        default (patience None) only where they are AUTO_MIN_VALIDATION or more, else early
        stopping is off and nothing is held out."""
        assert self.early_stop is not None
        al = self.alignments["train"]
        scorable = np.zeros(len(al), dtype=bool)
        for index in al.groups().values():  # samples some party holds features of
            scorable[index] = True
        labelled = [al.rows[b] >= 0 for b in self.label_blocks if b in al.rows]
        scorable &= np.any(labelled, axis=0) if labelled else False
        auto = self.config.early_stop_patience is None
        try:
            self._training, self._validation = hold_out(
                scorable, self.config.seed, self.config.validation_fraction
            )
        except ConfigError:
            if not auto:
                raise
            self._training, self._validation = None, np.zeros(0, dtype=np.int64)
        if auto and len(self._validation) < AUTO_MIN_VALIDATION:
            log.info(
                "early stopping off: %d validation samples, fewer than the %d the default needs "
                "(--early-stop-patience N holds them out anyway); every epoch trains",
                len(self._validation),
                AUTO_MIN_VALIDATION,
            )
            self.early_stop = self._training = self._validation = None
            return
        self.early_stop.validation_samples = len(self._validation)
        log.info(
            "early stopping: %d of %d training samples held out for validation (patience %d)",
            len(self._validation),
            len(al),
            self.early_stop.patience,
        )

    def _class_weights(self) -> np.ndarray:
        """Per-key weights from the label parties (lowest block first that holds each sample)."""
        al = self.alignments["train"]
        weights = np.full(len(al), np.nan)
        for block in sorted(b for b, i in self.infos.items() if i.has_labels and b in al.rows):
            w = self.transport.class_weights(block, "train")
            if w is None or not self._sound_weights(block, w):
                continue
            rows = al.rows[block]
            fill = (rows >= 0) & np.isnan(weights)
            weights[fill] = w[rows[fill]]
        if np.isnan(weights).all():
            raise ConfigError("class-balanced resampling needs a label party that answers")
        weights[np.isnan(weights)] = np.nanmean(weights)
        return weights

    def _sound_weights(self, block: int, weights: np.ndarray) -> bool:
        """Whether a label party's class weights fit: one finite, non-negative weight per train
        row it registered. Others are said and not used (they would index past the rows, or
        make the resampling fail)."""
        rows = self.infos[block].samples.get("train", 0)
        if len(weights) != rows:
            fault = f"{len(weights)} weights for its {rows} rows"
        elif not (np.isfinite(weights).all() and (weights >= 0).all()):
            fault = "weights that are not finite and non-negative"
        else:
            return True
        log.warning("class weights of block %d refused: %s", block, fault)
        return False

    # ------------------------------------------------------------------ training
    @property
    def hooks(self) -> ProgramHooks | None:
        """The method's round program, if it has one with hooks (stages, plans, state)."""
        program = self.spec.program
        return program if isinstance(program, ProgramHooks) else None

    @property
    def total_epochs(self) -> int:
        """Epochs of the whole run (a round program may add stages after the configured ones)."""
        return self.config.total_epochs

    def plan(self, epoch: int) -> list[Batch]:
        planned = None if self.hooks is None else self.hooks.plan(self, epoch)
        return self.base_plan(epoch) if planned is None else planned

    def base_plan(self, epoch: int) -> list[Batch]:
        """Every training sample once, in single-pattern batches (weighted if resampling);
        without the samples held out for validation (vfl_core.training.early_stop)."""
        al, weights, keep = self.alignments["train"], self._weights, self._training
        if keep is None:
            return epoch_plan(al, self.config.seed, epoch, self.config.batch_size, weights)
        # Without the validation samples; batch indices back into the whole train alignment.
        part = None if weights is None else weights[keep]
        plan = epoch_plan(al.subset(keep), self.config.seed, epoch, self.config.batch_size, part)
        return [replace(b, index=keep[b.index]) for b in plan]

    def train(self, start_epoch: int = 0) -> list[EpochSummary]:
        """Train to the last epoch from the cursor (a resumed run continues mid-epoch); returns
        the summaries of every epoch the cursor has seen."""
        if start_epoch > self.cursor.epoch:
            self.cursor = Cursor(epoch=start_epoch)
        while self.cursor.epoch < self.total_epochs:
            self._align_again_if_due()
            self.train_epoch(self.cursor.epoch)
            if self._stop_early():
                break
        restored = self._restore_best()
        self.choose_on_validation()
        # the end's checkpoint holds the weights the parties end on (a party restarted while
        # the coordinator serves predicts with them): after going back to the best epoch, again
        if self.checkpoint_every is not None and (
            restored or self.round_id - 1 > self.last_checkpoint
        ):
            self.checkpoint()
        return list(self.cursor.summaries)

    def train_epoch(self, epoch: int) -> EpochSummary:
        if self.cursor.epoch != epoch:
            self.cursor = Cursor(epoch=epoch, summaries=self.cursor.summaries)
        c = self.cursor
        start = time.perf_counter() - c.seconds
        plan = self.plan(epoch)  # a pure function of (seed, epoch): a resumed run skips its head
        bar = tqdm(
            self._rounds(epoch, plan[c.position :]),
            desc=f"epoch {epoch + 1}/{self.total_epochs}",
            initial=c.position,
            total=len(plan),
            disable=not self.progress,
            leave=False,
        )
        for record in bar:
            batch = plan[c.position]  # records come in plan order
            self.round_id += 1
            c.position += 1
            c.losses.extend(record.losses.values())
            for head, loss in record.losses.items():
                c.head_losses.setdefault(head, []).append(loss)
            # A batch whose observed set cannot train under the method (no label party holds its
            # samples) calls nobody: not an incomplete round, nobody failed.
            trainable = self.spec.trainable(
                batch.pattern, self.num_blocks, self.label_blocks, batch.label_only
            )
            c.incomplete += trainable and record.present != record.pattern
            c.seconds = time.perf_counter() - start
            for observer in self.observers:
                observer.round_done(self, record)
            if self.checkpoint_every and self.round_id % self.checkpoint_every == 0:
                self.checkpoint()
        return self._end_epoch(epoch, len(plan), time.perf_counter() - start)

    def _end_epoch(self, epoch: int, rounds: int, seconds: float) -> EpochSummary:
        """Close the cursor's epoch after `rounds` batches (its plan's, or fewer where a resumed
        run cuts it) and tell the observers."""
        summary = self._summary(epoch, rounds, seconds)
        self.cursor = Cursor(epoch=epoch + 1, summaries=[*self.cursor.summaries, summary])
        for observer in self.observers:
            observer.epoch_done(self, summary)
        return summary

    def _rounds(self, epoch: int, batches: Sequence[Batch]) -> Iterator[RoundRecord]:
        """The records of `batches`' rounds, in order, as each finishes (self.round_id is the
        next round's id whenever this resumes). The pipeline drains at every checkpoint round,
        so a checkpoint holds whole rounds, and when no party that can train is up: the rounds
        of a pause run one by one (`_round_when_up`), and the pipeline starts again after it."""
        if not self.pipeline or self.spec.program is not None:  # (a method's own phases)
            for batch in batches:
                yield self._round_when_up(epoch, batch)
            return
        every = self.checkpoint_every or len(batches) + self.round_id + 1
        start = 0
        while start < len(batches):
            if self._pause_due():
                yield self._round_when_up(epoch, batches[start])
                start += 1
                continue
            end = start + (every - self.round_id % every)  # up to the next checkpoint round
            rounds = pipeline.run(
                self, epoch, batches[start:end], self.round_id, stop=self._pause_due
            )
            for record in rounds:
                start += 1
                yield record

    def _pause_due(self) -> bool:
        """Whether training must pause: pausing is on and no party that can train is up."""
        return self.rejoin_timeout_s is not None and not self._heads_up()

    def _summary(self, epoch: int, rounds: int, seconds: float) -> EpochSummary:
        c = self.cursor
        summary = EpochSummary(
            epoch=epoch,
            rounds=rounds,
            mean_loss=float(np.mean(c.losses)) if c.losses else float("nan"),
            seconds=seconds,
            incomplete_rounds=c.incomplete,
            head_losses={k: float(np.mean(v)) for k, v in sorted(c.head_losses.items())},
        )
        log.info(
            "epoch %d: %d rounds, mean head loss %.4f, %d incomplete, %.1fs",
            epoch + 1,
            summary.rounds,
            summary.mean_loss,
            summary.incomplete_rounds,
            summary.seconds,
        )
        return summary

    def checkpoint(self) -> set[int]:
        """Every party not marked down and in the alignment saves its state after the last
        round; then the observers hear of it (the coordinator's checkpointer saves its own: a
        round every party has). A party left out of the alignment took no part in the rounds
        since: a checkpoint named by this round would hold an older one."""
        done = self.round_id - 1
        blocks = [
            b
            for b in sorted(self.infos)
            if self.liveness.state.get(b) != DOWN and b not in self.unaligned
        ]
        saved = self.transport.checkpoint(done, blocks)
        if set(blocks) - saved:
            log.warning("checkpoint %d: blocks %s did not save", done, sorted(set(blocks) - saved))
        self.last_checkpoint = done
        for observer in self.observers:
            observer.checkpoint_done(self, done, saved)
        return saved

    # ------------------------------------------------------------------ early stopping
    def _stop_early(self) -> bool:
        """After an epoch: score the validation samples; the parties keep their state when it
        is the best epoch so far. True when `patience` epochs passed without a better one."""
        stop = self.early_stop
        if stop is None or self._validation is None:
            return False
        epoch, last_round = self.cursor.epoch - 1, self.round_id - 1
        report = self.evaluate("train", index=self._validation)
        value = getattr(report.overall(), stop.metric) if report.scored else None
        if stop.observe(epoch, value, last_round):
            blocks = [b for b in sorted(self.infos) if self.liveness.state.get(b) != DOWN]
            stop.kept = sorted(self.transport.snapshot(last_round, blocks, restore=False))
        log.info(
            "epoch %d: validation %s %s (best %.4f at epoch %d)",
            epoch + 1,
            stop.metric,
            "none scored" if value is None else f"{value:.4f}",
            stop.best_value,
            stop.best_epoch + 1,
        )
        if stop.due and self.cursor.epoch < self.config.epochs:
            stop.stopped_epoch = epoch
            return True
        return False

    def _restore_best(self) -> bool:
        """Every party that kept its state of the best validation epoch goes back to it; True
        if any did."""
        stop = self.early_stop
        if stop is None or stop.best_epoch < 0:
            return False
        blocks = [b for b in sorted(self.infos) if self.liveness.state.get(b) != DOWN]
        stop.restored = sorted(self.transport.snapshot(stop.best_round, blocks, restore=True))
        ended = (
            f"early stop at epoch {stop.stopped_epoch + 1}"
            if stop.stopped_epoch is not None
            else f"all {self.cursor.epoch} epochs trained"
        )
        log.info(
            "%s: best validation %s %.4f at epoch %d, restored",
            ended,
            stop.metric,
            stop.best_value,
            stop.best_epoch + 1,
        )
        kept_last = sorted(set(blocks) - set(stop.restored))
        if kept_last:
            log.warning(
                "blocks %s keep their last weights: they have no state of epoch %d to go back "
                "to (down then, or restarted since)",
                kept_last,
                stop.best_epoch + 1,
            )
        return bool(stop.restored)

    # ------------------------------------------------------------------ validation choice
    def choose_on_validation(self) -> ValidationChoice:
        """After training: the subsets and the threshold the validation samples choose
        (TrainConfig.subset_choice, .threshold; vfl_core.inference.choice). Nothing is chosen
        without validation samples (early stopping off), or for a method without LASER-VFL's
        subset predictors."""
        self.choice = ValidationChoice()
        validation = self._validation
        if validation is None or not len(validation):
            return self.choice
        if self.config.subset_choice == "validation" and self._has_subset_predictors():
            self.choice.subsets, self.choice.candidates = choose_subsets(self, validation)
        binary = self.task != REGRESSION and self.num_classes == 2
        rule = self.config.threshold
        if rule in THRESHOLD_RULES and binary and self.spec.combination == "heads":
            found = choose_threshold(self, validation, str(rule))
            if found is not None:
                self.choice.threshold, tuned, plain = found
                self.choice.threshold_f1 = (plain, tuned)
                self.choice.threshold_metric = THRESHOLD_METRIC[str(rule)]
                log.info(
                    "validation: decision threshold %.3f (%s %.4f; at 0.5: %.4f)",
                    self.choice.threshold,
                    self.choice.threshold_metric,
                    tuned,
                    plain,
                )
        return self.choice

    def _has_subset_predictors(self) -> bool:
        """LASER-VFL's shape: shared f_k, a mean fusion and a head per label party that serves
        every subset containing it (not the baselines, not a method with a round program)."""
        spec = self.spec
        return (
            spec.program is None
            and spec.fusion == "mean"
            and spec.slots == "shared"
            and spec.combination == "heads"
            and not spec.own_block_only
            and not spec.needs_all_blocks
        )

    @property
    def threshold(self) -> float | None:
        """The decision threshold of binary predictions: a configured number (0.5: the plain
        argmax, None), or the one the validation samples chose ("auto")."""
        configured = self.config.threshold
        if configured in THRESHOLD_RULES:
            return self.choice.threshold
        return None if configured == 0.5 else float(configured)

    def _served(
        self, pattern: tuple[int, ...], blocks: Collection[int] | None
    ) -> tuple[Collection[int] | None, tuple[int, ...]]:
        """The parties a batch of `pattern` is predicted from (None: every live one) and those
        of its pattern the validation choice leaves out, for the set of them that is live now."""
        if not self.choice.subsets:
            return blocks, ()
        available = tuple(
            b
            for b in pattern
            if (blocks is None or b in blocks) and self.liveness.should_call(b, self._tick)
        )
        dropped = tuple(sorted(set(available) - set(self.choice.kept(available))))
        if not dropped:
            return blocks, ()
        base = set(self.infos) if blocks is None else set(blocks)
        return base - set(dropped), dropped

    # ------------------------------------------------------------------ snapshot and resume
    # A snapshot taken after round r holds the next round (r + 1), the inference request counter,
    # the cursor (epoch, batches of the epoch's plan already run, the epoch's losses so far,
    # finished epoch summaries) and the liveness state machine. Nothing else is needed to resume:
    # the plan is a pure function of (seed, epoch, alignment), task samples of (seed, round,
    # party), and every party rolls back to its own checkpoint of round r.
    def snapshot(self) -> dict[str, object]:
        """Where the run stands, as plain data (the coordinator's checkpoint holds it)."""
        c = self.cursor
        return {
            "next_round": self.round_id,
            "request_id": self.request_id,
            "epoch": c.epoch,
            "position": c.position,
            "losses": [float(x) for x in c.losses],
            "head_losses": {int(k): [float(x) for x in v] for k, v in c.head_losses.items()},
            "incomplete": int(c.incomplete),
            "seconds": float(c.seconds),
            "summaries": [asdict(s) for s in c.summaries],
            "liveness": self.liveness.to_state(),
            # the blocks in each split's alignment: the epoch's plan was made with these
            "aligned": {split: sorted(al.rows) for split, al in self.alignments.items()},
            # a method's round program (dvfl: its hosts' liveness, transfer and byte counts)
            **({"program": self.hooks.state(self)} if self.hooks is not None else {}),
            "early_stop": None if self.early_stop is None else self.early_stop.to_json(),
            # the pauses so far: a restarted coordinator's results.json lists them too
            "pauses": [asdict(p) for p in self.pauses],
            "choice": self.choice.to_json(),
        }

    def restore(self, saved: dict, present: Iterable[int] = ()) -> None:
        """Continue (already aligned) from a `snapshot()`. Parties in `present` that the
        snapshot had marked down registered again since: they are rejoining."""
        epoch, position = int(saved["epoch"]), int(saved["position"])
        absent = self._absent_since(saved)
        cut = bool(absent) and epoch < self.total_epochs and position > 0
        if cut:
            # The epoch's plan was made with these parties' samples, and this alignment lacks
            # them (silent while the coordinator aligned again): its rest cannot be told apart
            # from another plan, so the epoch ends here and the next starts without them, until
            # they are heard from again (`unaligned`).
            log.warning(
                "resuming without blocks %s, which did not answer the alignment: epoch %d ends "
                "at its %d batches so far",
                absent,
                epoch + 1,
                position,
            )
        elif epoch < self.total_epochs and position > len(self.plan(epoch)):
            raise ConfigError(
                f"checkpoint is {position} batches into epoch {epoch + 1}, whose plan has only "
                f"{len(self.plan(epoch))}: the parties' data changed since"
            )
        self.round_id = int(saved["next_round"])
        self.request_id = int(saved["request_id"])
        self.last_checkpoint = self.round_id - 1
        self.cursor = Cursor(
            epoch=epoch,
            position=position,
            losses=[float(x) for x in saved["losses"]],
            # older checkpoints lack the per-head split of the epoch's losses so far
            head_losses={int(k): list(v) for k, v in saved.get("head_losses", {}).items()},
            incomplete=int(saved["incomplete"]),
            seconds=float(saved["seconds"]),
            summaries=[_saved_summary(s) for s in saved["summaries"]],
        )
        if self.early_stop is not None and saved.get("early_stop"):
            self.early_stop = EarlyStop.from_json(saved["early_stop"])  # the best epoch so far
        if saved.get("choice"):
            self.choice = ValidationChoice.from_json(saved["choice"])
        if cut:
            self._end_epoch(epoch, position, self.cursor.seconds)
        self.liveness.load_state(saved["liveness"])
        self.pauses = [Pause(**p) for p in saved.get("pauses", [])]  # older checkpoints: none
        if self.hooks is not None and "program" in saved:
            self.hooks.load_state(self, saved["program"])
        for block in sorted(present):
            if self.liveness.state.get(block) == DOWN:
                self.liveness.rejoined(block, self._tick)

    def _absent_since(self, saved: dict) -> list[int]:
        """Blocks of the snapshot's train alignment that this one lacks (older checkpoints do
        not say: none)."""
        before = saved.get("aligned", {}).get("train", [])
        now = self.alignments["train"].rows if "train" in self.alignments else {}
        return sorted(int(b) for b in before if int(b) not in now)

    # ------------------------------------------------------------------ pausing
    def _round_when_up(self, epoch: int, batch: Batch) -> RoundRecord:
        """Run the batch's round once a party that can train is up. A retry of the down parties
        during a pause that none of them answers is not counted: the batch waits."""
        while True:
            probing = self._await_heads(epoch)
            record = self.run_round(self.round_id, epoch, batch)
            if not probing or self._heads_up():
                self._end_pause(epoch, resumed=True)
                return record
            log.info("round %d: no down party answered the retry; still paused", self.round_id)

    def _heads_up(self) -> bool:
        """Whether a party that can train under the method is not marked down."""
        labels = self.label_blocks
        if self.spec.heads == "active_party":
            labels = (active_party(labels),)  # type: ignore[assignment]
        return bool(self.liveness.live(labels))

    def _await_heads(self, epoch: int) -> bool:
        """False at once while a party that can train is up. Otherwise pause: False when one
        registers again, True when it is time to call the down parties anyway; FederationDown
        once the pause has lasted `rejoin_timeout_s`."""
        if self.rejoin_timeout_s is None:
            return False
        self._poll_rejoins()
        if self._heads_up():
            return False
        if self._paused_since is None:
            self._paused_since = time.monotonic()
            log.warning(
                "round %d (epoch %d): no label party is up; training pauses until one comes back "
                "(at most %gs)",
                self.round_id,
                epoch + 1,
                self.rejoin_timeout_s,
            )
        probe_at = time.monotonic() + PAUSE_PROBE_S
        while True:
            waited = time.monotonic() - self._paused_since
            if waited >= self.rejoin_timeout_s:
                self._end_pause(epoch, resumed=False)
                raise FederationDown(
                    f"no label party came back within {self.rejoin_timeout_s:g}s (training "
                    f"waited {waited:.1f}s at round {self.round_id}, epoch {epoch + 1} of "
                    f"{self.config.epochs}): the run stops"
                )
            time.sleep(min(PAUSE_POLL_S, self.rejoin_timeout_s - waited))
            self._poll_rejoins()
            if self._heads_up():
                return False
            if time.monotonic() >= probe_at:
                self.liveness.retry_now(self._tick)
                return True

    def _end_pause(self, epoch: int, resumed: bool) -> None:
        if self._paused_since is None:
            return
        seconds = time.monotonic() - self._paused_since
        self._paused_since = None
        self.pauses.append(Pause(self.round_id, epoch, seconds, resumed))
        if resumed:
            log.warning(
                "training resumes at round %d after a pause of %.1fs", self.round_id, seconds
            )

    def _poll_rejoins(self, tick: int | None = None) -> None:
        """Parties that registered again since the last round are called again at once."""
        rejoined = sorted(self.transport.rejoined())
        infos = self.transport.infos() if rejoined else {}
        for block in rejoined:
            if block in self.unaligned or block not in self.infos:
                self._realign_due = True  # it holds samples the plan lacks
            elif self._holds_other_rows(block, infos.get(block)):
                self._realign_due = True  # the plan's rows of it are another data set's
                self._other_rows.add(block)
                continue  # called again once aligned on its new rows (_align_again_if_due)
            if self.alignment == "psi":
                self._resend_psi_keys(block)
            self._call_again(block, self._tick if tick is None else tick)

    def _call_again(self, block: int, tick: int) -> None:
        if self.hooks is None or not self.hooks.rejoined(self, block):
            self.liveness.rejoined(block, tick)

    def _holds_other_rows(self, block: int, info: PartyInfo | None) -> bool:
        """Whether a party that registered again counts other rows than when it was aligned (a
        restart on another data set): said, and true; it is not called on the old rows (it would
        refuse them) until it is aligned again (_align_again_if_due)."""
        old = self.infos[block]
        if info is None or (info.samples, info.label_only) == (old.samples, old.label_only):
            return False
        changes = ", ".join(
            f"{split} {old.samples.get(split, 0)} -> {info.samples.get(split, 0)}"
            for split in sorted({*old.samples, *info.samples})
            if old.samples.get(split, 0) != info.samples.get(split, 0)
        )
        log.warning(
            "block %d (%s) registered again holding other rows (%s): aligned again at the "
            "next epoch's start (after training: before the test table or a prediction), and "
            "called again from there",
            block,
            info.party_id,
            changes or "label-only rows",
        )
        return True

    def _resend_psi_keys(self, block: int) -> None:
        """A restarted party has lost the PSI values of its rows (its batch digests use them):
        send them again, in its row order."""
        for split, al in self.alignments.items():
            rows = al.rows.get(block)
            if rows is None:
                continue
            held = np.flatnonzero(rows >= 0)
            keys = [b""] * len(held)
            for i in held:
                keys[int(rows[i])] = al.keys[int(i)]
            self.transport.psi_keys({block: PsiCall(split, psi.new_session(), keys)})

    def run_round(self, round_id: int, epoch: int, batch: Batch) -> RoundRecord:
        self._poll_rejoins()
        if self.spec.program is not None:  # a method with phases of its own
            return self.spec.program.train_round(self, round_id, epoch, batch)
        spec, labels = self.spec, self.label_blocks
        if not spec.trainable(batch.pattern, self.num_blocks, labels, batch.label_only):
            return RoundRecord(round_id, epoch, batch.pattern, (), {}, ())
        al = self.alignments["train"]
        digest = al.digest(batch.index)
        callees = tuple(b for b in batch.pattern if self.liveness.should_call(b, self._tick))
        calls = {
            b: EmbedCall(round_id, "train", al.rows_of(b, batch.index), digest, True, callees)
            for b in callees
        }
        where = f"round {round_id}"
        embeddings = self._accept(
            self.transport.embed(calls), callees, len(batch.index), "embed", where
        )
        present = tuple(sorted(embeddings))
        holders = tuple(b for b in batch.label_only if self.liveness.should_call(b, self._tick))
        if not spec.trainable(present, self.num_blocks, labels, holders):
            # Too few parties answered for this method (svfl without a party, a split-learning
            # head party down): the round is skipped, so no optimiser steps on zero gradients.
            return RoundRecord(round_id, epoch, batch.pattern, present, {}, ())
        fused = self._fuse(round_id, epoch, embeddings, callees, batch, holders, where)
        backward_calls = {b: BackwardCall(round_id, epoch, _sum_grads(fused, b)) for b in present}
        updated = self.transport.backward(backward_calls) if backward_calls else set()
        self._record(present, updated, "backward", where)
        return RoundRecord(
            round_id=round_id,
            epoch=epoch,
            pattern=batch.pattern,
            present=present,
            losses={k: fused[k].loss for k in sorted(fused)},
            updated=tuple(sorted(updated)),
        )

    def _fuse(
        self,
        round_id: int,
        epoch: int,
        embeddings: dict[int, np.ndarray],
        callees: tuple[int, ...],
        batch: Batch,
        holders: tuple[int, ...],
        where: str,
    ) -> dict[int, FuseResult]:
        """Fuse at each head party of the method (and at the live label-only holders where the
        method's heads serve feature-only blocks); keep the answers whose gradients fit."""
        calls = self._fuse_calls(round_id, epoch, embeddings, callees, batch, holders)
        fused = self.transport.fuse(calls) if calls else {}
        return self._fused(calls, fused, callees, len(batch.index), where)

    def _fuse_calls(
        self,
        round_id: int,
        epoch: int,
        embeddings: dict[int, np.ndarray],
        callees: tuple[int, ...],
        batch: Batch,
        holders: tuple[int, ...],
    ) -> dict[int, FuseCall]:
        """One FuseCall per head party of the method (label-only holders included)."""
        heads = self.spec.fuse_parties(sorted(embeddings), self.label_blocks, holders)
        return {k: self._fuse_call(k, round_id, epoch, embeddings, callees, batch) for k in heads}

    def _fused(
        self,
        calls: dict[int, FuseCall],
        fused: dict[int, FuseResult],
        callees: tuple[int, ...],
        size: int,
        where: str,
        tick: int | None = None,
    ) -> dict[int, FuseResult]:
        """The answers whose gradients fit; every head party's liveness recorded."""
        fused = {
            k: r
            for k, r in fused.items()
            if k in calls
            and all(
                well_formed(r.grads.get(b), (size, self._width(b, callees)))
                for b in calls[k].embeddings
            )
        }
        self._record(calls, fused, "fuse", where, tick=tick)
        return fused

    def _fuse_call(
        self,
        k: int,
        round_id: int,
        epoch: int,
        embeddings: dict[int, np.ndarray],
        callees: tuple[int, ...],
        batch: Batch,
    ) -> FuseCall:
        """Party k's Fuse call: the others' embeddings (none for local predictors); a label-only
        holder, which embedded nothing, is also told its rows of the batch."""
        shared = self.spec.shares_embeddings
        others = {b: e for b, e in sorted(embeddings.items()) if b != k and shared}
        call = FuseCall(round_id, epoch, others, callees, self.label_blocks)
        if k in embeddings:
            return call
        al = self.alignments["train"]
        return replace(call, rows=al.rows_of(k, batch.index), digest=al.digest(batch.index))

    def _width(self, block: int, callees: tuple[int, ...]) -> int:
        width = None if self.hooks is None else self.hooks.embed_width(self)
        if width is not None:
            return width
        return len(self.spec.slot_keys(block, callees)) * self.config.model.embed_dim

    def _accept(
        self,
        answers: dict[int, np.ndarray],
        callees: tuple[int, ...],
        size: int,
        phase: str,
        where: str,
        immediate: bool = False,
        tick: int | None = None,
    ) -> dict[int, np.ndarray]:
        good = {
            b: a
            for b, a in answers.items()
            if b in callees and well_formed(a, (size, self._width(b, callees)))
        }
        for b in answers.keys() - good.keys():
            log.warning("%s: %s answer of block %d refused (shape/dtype/NaN)", where, phase, b)
        self._record(callees, good, phase, where, immediate, tick)
        return good

    def _record(
        self,
        expected: Iterable[int],
        got: Container[int],
        phase: str,
        where: str,
        immediate: bool = False,
        tick: int | None = None,
    ) -> None:
        tick = self._tick if tick is None else tick
        for b in expected:
            if b in got:
                self.liveness.answered(b, tick)
            else:
                log.info("%s: block %d missed %s", where, b, phase)
                self.liveness.failed(b, tick, phase, immediate)

    @property
    def _tick(self) -> int:
        """Advances with every training round and every inference batch (liveness clock)."""
        return self.round_id + self.request_id

    # ------------------------------------------------------------------ inference
    def predict_batches(
        self,
        split: str = "test",
        index: np.ndarray | None = None,
        blocks: Collection[int] | None = None,
    ) -> Iterator[PredictionBatch]:
        """Predict every sample of `split` (or the given key indices) from the live parties, or
        only from the live parties of `blocks` (the others are not called: as if they were gone).
        A batch that no block of `blocks` holds gets no prediction (no call either)."""
        al = self.alignments[split]
        for batch in eval_plan(al, self.config.eval_batch_size, index):
            if blocks is not None and not set(batch.pattern) & set(blocks):
                yield PredictionBatch(batch.index, batch.pattern, (), {}, None)
                continue
            served, dropped = self._served(batch.pattern, blocks)
            pred = self._predict_batch(split, batch, served)
            yield replace(pred, dropped=dropped) if dropped else pred

    def _predict_batch(
        self, split: str, batch: Batch, blocks: Collection[int] | None = None
    ) -> PredictionBatch:
        self._poll_rejoins()
        request = self.request_id
        self.request_id += 1
        if self.spec.program is not None:  # a method with phases of its own
            return self.spec.program.predict_batch(self, split, batch, request, blocks)
        embeddings, callees = self._inference_embeddings(split, batch, request, blocks)
        present = tuple(sorted(embeddings))
        gen = self.eval_rng(batch)
        spec, labels = self.spec, self.label_blocks
        regression = self.task == REGRESSION
        predictors = spec.predictors(present, self.num_blocks, labels)
        if predictors is not None:  # parties outside the observed set: those we can reach
            predictors = [k for k in predictors if k in present or self._reachable(k, blocks)]
        if predictors is None:  # standard VFL with a block missing
            if regression:  # no prediction, unscored
                return batch_prediction(batch, present, {}, None, regression)
            guess = random_guess(str(active_party(labels)), len(batch.index), self.num_classes, gen)
            return batch_prediction(batch, present, {}, guess, regression)
        shared = spec.shares_embeddings
        calls = {
            k: PredictCall(
                request, {b: e for b, e in embeddings.items() if shared or b == k}, callees, labels
            )
            for k in predictors
        }
        size = (len(batch.index), self.num_classes)
        probs = {
            k: p for k, p in sorted(self.transport.predict(calls).items()) if well_formed(p, size)
        }
        # A label party serving the others' set was not asked to embed: its Predict answer is
        # the only sign of life, so a miss marks it down at once (as a missed Embed does).
        outside = [k for k in calls if k not in present]
        self._record(outside, probs, "predict", f"{split} request {request}", immediate=True)
        combined = combine(spec.combination, present, probs, gen, regression, self.threshold)
        return batch_prediction(batch, present, probs, combined, regression)

    def eval_rng(self, batch: Batch) -> np.random.Generator:
        """The random draws of an inference batch (a vote's ties, a guess for a missing party),
        keyed by its samples rather than the request counter: asked again, it answers the same."""
        first = int(batch.index[0]) if len(batch.index) else 0
        return rng(self.config.seed, Stream.EVAL_RANDOM, first, len(batch.index))

    def _reachable(self, block: int, blocks: Collection[int] | None) -> bool:
        """Whether a party outside a batch's observed set may be called (live, and among
        `blocks` when only those are called)."""
        return (blocks is None or block in blocks) and self.liveness.should_call(block, self._tick)

    def _inference_embeddings(
        self, split: str, batch: Batch, request: int, blocks: Collection[int] | None
    ) -> tuple[dict[int, np.ndarray], tuple[int, ...]]:
        """The embeddings of the batch from the live parties (of `blocks`), and who was called."""
        al = self.alignments[split]
        digest = al.digest(batch.index)
        callees = tuple(
            b
            for b in batch.pattern
            if (blocks is None or b in blocks) and self.liveness.should_call(b, self._tick)
        )
        calls = {
            b: EmbedCall(request, split, al.rows_of(b, batch.index), digest, False, callees)
            for b in callees
        }
        # At inference a caller is waiting: a party that misses one deadline is marked down at
        # once (and retried every retry_every requests) instead of costing a deadline per batch.
        answers = self.transport.embed(calls)
        where = f"{split} request {request}"
        size = len(batch.index)
        return self._accept(answers, callees, size, "embed", where, immediate=True), callees

    def evaluate(
        self,
        split: str = "test",
        blocks: Collection[int] | None = None,
        index: np.ndarray | None = None,
        federation_scores: bool = False,
    ) -> EvalReport:
        """Metrics of `split` (or of its key indices `index`) by observed set, from every live
        party or only those of `blocks` (samples that none of them holds are unscored). With
        `federation_scores` (binary tasks), the label parties also return the histogram of the
        federation's positive-class probability (vfl_core.inference.choice)."""
        report = EvalReport()
        for pred in self.predict_batches(split, index, blocks):
            asked = [
                b for b in pred.pattern if (blocks is None or b in blocks) and b not in pred.dropped
            ]
            report.count_answers(asked, pred.present)  # who was live for this batch
            report.chosen_out.update(pred.dropped)
            served = blocks
            if pred.dropped:
                served = (set(self.infos) if blocks is None else set(blocks)) - set(pred.dropped)
            result = (
                self._score(split, pred, served, federation_scores)
                if pred.predicted is not None
                else None
            )
            if result is None:
                report.unscored += len(pred.index)
                continue
            # by observed set: the parties that answered and those the choice left out
            report.add(tuple(sorted({*pred.present, *pred.dropped})), len(pred.index), result)
        return report

    def _score(
        self,
        split: str,
        pred: PredictionBatch,
        blocks: Collection[int] | None = None,
        federation_scores: bool = False,
    ) -> ScoreResult | None:
        """Aggregates (confusion counts, AUC histograms or error sums) from the first present
        label party that answers, else from a reachable party holding the labels only."""
        assert pred.predicted is not None
        al = self.alignments[split]
        named = {**pred.scored, FEDERATION: pred.predicted}
        if pred.regression:
            predictions = {}
            scores = {name: v.astype(np.float32) for name, v in named.items()}
        else:
            predictions, scores = named, {n: s.astype(np.float32) for n, s in pred.scores.items()}
            if federation_scores and pred.federation is not None and pred.federation.shape[1] == 2:
                scores[FEDERATION] = pred.federation[:, 1].astype(np.float32)
        digest = al.digest(pred.index)
        label_only = [
            b
            for b, mask in sorted(al.label_only.items())
            if mask[pred.index].all() and self._reachable(b, blocks)
        ]
        for scorer in [*(b for b in pred.present if b in self.label_blocks), *label_only]:
            rows = al.rows_of(scorer, pred.index)
            call = ScoreCall(split, rows, digest, predictions, scores)
            result = self.transport.score(scorer, call)
            if result is None:
                continue
            if result_fits(result, self.task, self.num_classes, set(named)):
                return result
            log.warning("%s: score answer of block %d refused (names/shapes)", split, scorer)
        return None

    def method_stats(self) -> dict[str, object] | None:
        """What a round program reports of its run (results.json), if the method has one."""
        return None if self.hooks is None else self.hooks.stats(self)

    # ------------------------------------------------------------------ federation facts
    @property
    def label_blocks(self) -> tuple[int, ...]:
        return tuple(sorted(b for b, i in self.infos.items() if i.has_labels))

    @property
    def num_blocks(self) -> int:
        return next(iter(self.infos.values())).num_blocks

    @property
    def num_classes(self) -> int:
        return next(iter(self.infos.values())).num_classes

    @property
    def task(self) -> str:
        return next(iter(self.infos.values())).task


def _saved_summary(saved: dict) -> EpochSummary:
    heads = {int(k): float(v) for k, v in saved.get("head_losses", {}).items()}
    return EpochSummary(**{**saved, "head_losses": heads})


def well_formed(array: np.ndarray | None, shape: tuple[int, int]) -> bool:
    """A party's answer has the shape asked for, float32 and finite values only."""
    return (
        array is not None
        and array.dtype == np.float32
        and array.shape == shape
        and bool(np.isfinite(array).all())
    )


def batch_prediction(
    batch: Batch,
    present: tuple[int, ...],
    probs: dict[int, np.ndarray],
    combined: Combined | None,
    regression: bool,
) -> PredictionBatch:
    """The batch's prediction; without a combined one (no head answered), none."""
    if combined is None:
        return PredictionBatch(
            batch.index, batch.pattern, present, probs, None, regression=regression
        )
    return PredictionBatch(
        batch.index,
        batch.pattern,
        present,
        probs,
        combined.federation,
        combined.predicted,
        combined.scored,
        combined.scores,
        regression,
    )


def _sum_grads(fused: dict, block: int) -> np.ndarray | None:
    """Sum of the other heads' gradients for `block`, in head order (same in every transport)."""
    total: np.ndarray | None = None
    for k in sorted(fused):
        grad = fused[k].grads.get(block)
        if k == block or grad is None:
            continue
        total = grad.copy() if total is None else total + grad
    return total


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
