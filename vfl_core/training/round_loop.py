"""The training loop: epochs of rounds from the cursor, the epoch summaries, the observers told
of every round, epoch and checkpoint, and the parties' checkpoints.

Part of the round engine (vfl_core.training.engine.Federation composes it). A round itself is
LaserRound's (or a method's round program); rounds run through the pipeline
(vfl_core.training.pipeline) unless the engine is sequential or the method has phases of its
own; a round waits while training is paused (vfl_core.training.liveness.Presence).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np
from tqdm import tqdm

from vfl_core.data.batch_plan import Batch
from vfl_core.methods.liveness import DOWN
from vfl_core.methods.outcomes import RoundRecord
from vfl_core.training import direct, direct_stale, pipeline
from vfl_core.training.records import Cursor, EpochSummary

if TYPE_CHECKING:
    from vfl_core.training.direct_eval import Started, Turns
    from vfl_core.training.ports import LoopRun

log = logging.getLogger(__name__)


class RoundLoop:
    """Runs the epochs of a run, round by round, from the cursor."""

    def __init__(self, fed: LoopRun) -> None:
        self.fed = fed

    def train(self, start_epoch: int) -> list[EpochSummary]:
        """Train to the last epoch from the cursor (a resumed run continues mid-epoch); returns
        the summaries of every epoch the cursor has seen."""
        fed = self.fed
        if start_epoch > fed.cursor.epoch:
            fed.cursor = Cursor(epoch=start_epoch)
        while fed.cursor.epoch < fed.total_epochs:
            if fed.ahead is None:  # (rounds sent ahead: a new alignment waits an epoch)
                fed.aligner.again_if_due()
            self.train_epoch(fed.cursor.epoch)
            if fed.validator.stop_early():
                break
        restored = fed.validator.restore_best()
        # the end's checkpoint holds the weights the parties end on (a party restarted while
        # the coordinator serves predicts with them): after going back to the best epoch, again,
        # and before the validation choice, so that a party restarted during the choice (or
        # later) rolls back to its best epoch's weights, not to its last periodic checkpoint
        if fed.checkpoint_every is not None and (
            restored or fed.round_id - 1 > fed.last_checkpoint
        ):
            self.checkpoint()
        fed.choose_on_validation()
        return list(fed.cursor.summaries)

    def train_epoch(self, epoch: int) -> EpochSummary:
        fed = self.fed
        if fed.cursor.epoch != epoch:
            fed.cursor = Cursor(epoch=epoch, summaries=fed.cursor.summaries)
        c = fed.cursor
        start = time.perf_counter() - c.seconds
        cpu_start = time.process_time() - c.cpu_seconds
        plan = fed.plan(epoch)  # a pure function of (seed, epoch): a resumed run skips its head
        bar = tqdm(
            self._rounds(epoch, plan[c.position :]),
            desc=f"epoch {epoch + 1}/{fed.total_epochs}",
            initial=c.position,
            total=len(plan),
            # None: tqdm draws only on a terminal (a log file or `docker logs` gets the epoch line)
            disable=None if fed.progress else True,
            leave=False,
        )
        for record in bar:
            batch = plan[c.position]  # records come in plan order
            fed.round_id += 1
            c.position += 1
            c.losses.extend(record.losses.values())
            for head, loss in record.losses.items():
                c.head_losses.setdefault(head, []).append(loss)
            # A batch whose observed set cannot train under the method (no label party holds its
            # samples) calls nobody: not an incomplete round, nobody failed.
            trainable = fed.spec.trainable(
                batch.pattern, fed.num_blocks, fed.label_blocks, batch.label_only
            )
            c.incomplete += trainable and record.present != record.pattern
            c.trained += trainable
            c.seconds = time.perf_counter() - start
            c.cpu_seconds = time.process_time() - cpu_start
            for observer in fed.observers:
                observer.round_done(fed, record)
            if fed.checkpoint_every and fed.round_id % fed.checkpoint_every == 0:
                self.checkpoint()
        return self.end_epoch(epoch, len(plan), time.perf_counter() - start)

    def end_epoch(self, epoch: int, rounds: int, seconds: float) -> EpochSummary:
        """Close the cursor's epoch after `rounds` batches (its plan's, or fewer where a resumed
        run cuts it) and tell the observers."""
        fed = self.fed
        summary = self._summary(epoch, rounds, seconds)
        fed.cursor = Cursor(epoch=epoch + 1, summaries=[*fed.cursor.summaries, summary])
        for observer in fed.observers:
            observer.epoch_done(fed, summary)
        return summary

    def _rounds(self, epoch: int, batches: Sequence[Batch]) -> Iterator[RoundRecord]:
        """The records of `batches`' rounds, in order, as each finishes (fed.round_id is the
        next round's id whenever this resumes). The pipeline drains at every checkpoint round,
        so a checkpoint holds whole rounds, and when no party that can train is up: the rounds
        of a pause run one by one (`Presence.round_when_up`), and the pipeline starts again
        after it."""
        fed, presence = self.fed, self.fed.presence
        if not fed.pipeline or fed.spec.program is not None:  # (a method's own phases)
            for batch in batches:
                yield presence.round_when_up(epoch, batch)
            return
        every = fed.checkpoint_every or len(batches) + fed.round_id + 1
        start = 0
        while start < len(batches):
            if fed.ahead is None and presence.pause_due():  # (sent ahead: they are out)
                yield presence.round_when_up(epoch, batches[start])
                start += 1
                continue
            end = start + (every - fed.round_id % every)  # up to the next checkpoint round
            # the epoch's end may go ahead (or the blocks flow on) where it is no checkpoint
            # round
            ends = end > len(batches)
            flow = self._flow(epoch) if ends and fed.config.epoch_flow else None
            if direct.supported(fed) and not direct.exact(fed):
                exact_end = ends and flow is None and self._exact_end()
                rounds = direct_stale.run(
                    fed,
                    epoch,
                    batches[start:end],
                    fed.round_id,
                    stop=presence.pause_due,
                    epoch_end=self._epoch_end(epoch) if ends else None,
                    flow=self._flow(epoch) if exact_end else flow,
                    exact_end=exact_end,
                )
            elif direct.supported(fed):
                rounds = direct.run(
                    fed, epoch, batches[start:end], fed.round_id, stop=presence.pause_due
                )
            else:  # in process, and the relay
                rounds = pipeline.run(
                    fed, epoch, batches[start:end], fed.round_id, presence.pause_due, flow
                )
            for record in rounds:
                start += 1
                yield record

    def _epoch_end(self, epoch: int) -> direct_stale.EpochEnd:
        """Epoch `epoch`'s end taken as its last rounds leave (direct_stale.EpochEnd): with
        --overlap-validation, its validation and the next epoch's first rounds go out at once,
        each party running them after its last rounds; the coordinator's wait for those
        rounds no longer delays the parties. Not where the next epoch may differ from its
        plan: a new alignment or a pause due, or no next epoch."""
        fed = self.fed

        def end(
            last: int, turns: Turns, running_on: bool
        ) -> tuple[Started, int, Sequence[Batch]] | None:
            following = epoch + 1
            if not running_on and (
                following >= fed.total_epochs or fed.aligner.due or fed.presence.pause_due()
            ):
                return None
            now = fed.round_id
            fed.round_id = last + 1  # the clock as after the epoch's last record
            try:
                started = fed.validator.begin_epoch_end(epoch, last, turns)
            finally:
                fed.round_id = now
            if started is None:
                return None
            plan = fed.plan(following)
            # the whole next epoch, one round as each round in flight is collected (the calls
            # in flight stay as many as inside an epoch): none of its rounds waits for this
            # epoch's last reports or its validation's
            size = len(plan)
            if fed.checkpoint_every:  # up to the next checkpoint round
                size = min(size, fed.checkpoint_every - (last + 1) % fed.checkpoint_every)
            return started, following, plan[:size]

        return end

    def _exact_end(self) -> bool:
        """--overlap-validation on the direct plane with staleness, without --epoch-flow:
        whether the next epoch's first block leaves ahead of the epoch's validation, after
        all the epoch's steps (direct_stale.run's `exact_end`). Its embeds then precede the
        validation's on each party's links and the validation is off the critical path
        between the parties (docs/data-plane.md). A pure schedule change: the validation
        reads the towers after the epoch's last step and the heads a head held before the
        next epoch's first fuse; not where a training embed would move running statistics
        the validation reads (batch normalisation, the image ResNet)."""
        config = self.fed.config
        model = config.model
        return (
            config.overlap_validation
            and model.norm != "batch"
            and model.representation != "resnet18"
        )

    def _flow(self, epoch: int) -> pipeline.Flow:
        """--epoch-flow: whether the blocks run on past epoch `epoch`'s end (pipeline.Flow),
        asked once its last block is embedded. Not past the last epoch, one after which
        training stops, a new alignment or a pause due; the next epoch's first block ends
        before its first checkpoint round."""
        fed = self.fed

        def following(first: int) -> tuple[int, Sequence[Batch]] | None:
            nxt = epoch + 1
            if nxt >= fed.total_epochs or fed.aligner.due or fed.presence.pause_due():
                return None
            if not fed.validator.flows():
                return None
            plan = fed.plan(nxt)
            size = len(plan)  # (as `_epoch_end`'s: the whole next epoch may go ahead)
            if fed.checkpoint_every:  # up to the next checkpoint round
                size = min(size, fed.checkpoint_every - first % fed.checkpoint_every)
            return nxt, plan[:size]

        return following

    def _summary(self, epoch: int, rounds: int, seconds: float) -> EpochSummary:
        c = self.fed.cursor
        summary = EpochSummary(
            epoch=epoch,
            rounds=rounds,
            mean_loss=float(np.mean(c.losses)) if c.losses else float("nan"),
            seconds=seconds,
            incomplete_rounds=c.incomplete,
            head_losses={k: float(np.mean(v)) for k, v in sorted(c.head_losses.items())},
            trained_rounds=c.trained,
            cpu_seconds=c.cpu_seconds,
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
        fed = self.fed
        done = fed.round_id - 1
        blocks = [
            b
            for b in sorted(fed.infos)
            if fed.liveness.state.get(b) != DOWN and b not in fed.unaligned
        ]
        saved = fed.transport.checkpoint(done, blocks)
        if set(blocks) - saved:
            log.warning("checkpoint %d: blocks %s did not save", done, sorted(set(blocks) - saved))
        fed.last_checkpoint = done
        for observer in fed.observers:
            observer.checkpoint_done(fed, done, saved)
        return saved
