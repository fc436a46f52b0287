"""What the held-out validation samples decide (vfl_core.training.early_stop): after each epoch,
whether it is the best so far (the parties keep their state) and whether to stop; at the end of
training, going back to the best epoch, then the subsets each observed set is predicted from and
the decision threshold (vfl_core.inference.choice), which every later prediction uses.

Part of the round engine (vfl_core.training.engine.Federation composes it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection
from typing import TYPE_CHECKING

import numpy as np

from vfl_core.config import THRESHOLD_RULES
from vfl_core.data.learning_task import REGRESSION
from vfl_core.inference.choice import (
    AUTO_THRESHOLD,
    THRESHOLD_METRIC,
    ValidationChoice,
    choose_heads_pooled,
    choose_subsets,
    choose_threshold,
)
from vfl_core.inference.metrics import EvalReport
from vfl_core.inference.unvalidated import unvalidated_heads
from vfl_core.methods.liveness import DOWN
from vfl_core.training import direct_eval
from vfl_core.training.cut_short import heads_left, no_head_answered
from vfl_core.training.late_validation import LateValidation
from vfl_core.training.retry import Backoff

if TYPE_CHECKING:
    from vfl_core.training.ports import ValidatorRun

log = logging.getLogger(__name__)

# How often a validation choice that no label party answered whole is made again.
CHOOSE_AGAIN_S = 2.0


class Validator:
    """Early stopping after each epoch, and the validation choice after training."""

    def __init__(self, fed: ValidatorRun) -> None:
        self.fed = fed
        self.late = LateValidation(fed, self.observe)

    # ------------------------------------------------------------------ early stopping
    def stop_early(self) -> bool:
        """After an epoch: score the validation samples; the parties keep their state when it
        is the best epoch so far. True when `patience` epochs passed without a better one.
        With --overlap-validation the verdict comes an epoch late
        (vfl_core.training.late_validation)."""
        fed = self.fed
        stop, validation = fed.early_stop, fed.train_rows.validation
        if stop is None or validation is None:
            return False
        if fed.config.overlap_validation:
            return self.late.stop_early()
        epoch, last_round = fed.cursor.epoch - 1, fed.round_id - 1
        report = fed.evaluate("train", index=validation)
        self.observe(epoch, report, last_round)
        if stop.due and fed.cursor.epoch < fed.config.epochs:
            stop.stopped_epoch = epoch
            return True
        return False

    def begin_epoch_end(
        self, epoch: int, last_round: int, turns: direct_eval.Turns
    ) -> direct_eval.Started | None:
        """Epoch `epoch`'s end before its last rounds are back (the next epoch sent ahead,
        vfl_core.training.direct_stale): with --overlap-validation, the verdict on the epoch
        before and this epoch's validation sent with `turns` (LateValidation.begin); the
        validation started, or None (nothing sent: the epoch ends as usual)."""
        fed = self.fed
        if not fed.config.overlap_validation or fed.early_stop is None:
            return None
        if fed.train_rows.validation is None:
            return None
        return self.late.begin(epoch, last_round, turns)

    def flows(self) -> bool:
        """--epoch-flow, at an epoch's end before its last rounds: whether the next epoch may
        start (the verdicts so far in: the run goes on after this epoch) with this epoch's
        validation taken at each party's own epoch's end. Only with early stopping, whose
        validation is that epoch's end (without it the epoch's end drains)."""
        fed = self.fed
        if fed.early_stop is None or fed.train_rows.validation is None:
            return False
        if not fed.config.overlap_validation:
            return False
        self.late.settle()
        return not fed.early_stop.due

    def observe(
        self, epoch: int, report: EvalReport, last_round: int, kept: list[int] | None = None
    ) -> bool:
        """Epoch `epoch`'s validation report into the early-stopping record; at a best epoch
        the parties keep their state of `last_round` (now, unless `kept` names who holds a copy
        of it to keep: the late verdict). True at a best epoch."""
        fed, stop = self.fed, self.fed.early_stop
        assert stop is not None
        cut = heads_left(fed, report)
        value = getattr(report.overall(), stop.metric) if report.scored and not cut else None
        if cut:  # the batches scored before the label parties went: no epoch's figure
            log.warning(
                "epoch %d: the validation was cut short (%d of %d samples scored: no label "
                "party answered all of it): the epoch counts as none scored",
                epoch + 1,
                report.scored,
                report.scored + report.unscored,
            )
        best = stop.observe(epoch, value, last_round)
        if best:
            blocks = [b for b in sorted(fed.infos) if fed.liveness.state.get(b) != DOWN]
            if kept is None:
                kept = sorted(fed.transport.snapshot(last_round, blocks, restore=False))
            stop.kept = sorted(set(kept) & set(blocks))
        log.info(
            "epoch %d: validation %s %s (best %.4f at epoch %d)",
            epoch + 1,
            stop.metric,
            "none scored" if value is None else f"{value:.4f}",
            stop.best_value,
            stop.best_epoch + 1,
        )
        return best

    def restore_best(self) -> bool:
        """Every party that kept its state of the best validation epoch goes back to it; True
        if any did."""
        fed = self.fed
        stop = fed.early_stop
        if stop is None or stop.best_epoch < 0:
            return False
        blocks = [b for b in sorted(fed.infos) if fed.liveness.state.get(b) != DOWN]
        stop.restored = sorted(fed.transport.snapshot(stop.best_round, blocks, restore=True))
        ended = (
            f"early stop at epoch {stop.stopped_epoch + 1}"
            if stop.stopped_epoch is not None
            else f"all {fed.cursor.epoch} epochs trained"
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
    def choose(self) -> ValidationChoice:
        """After training: the subsets and the threshold the validation samples choose
        (TrainConfig.subset_choice, .threshold; vfl_core.inference.choice). Nothing is chosen
        without validation samples (early stopping off), or for a method without LASER-VFL's
        subset predictors. Every candidate must be scored by the same parties: a choice during
        which a feature party went down is made again at once without it; one that no label
        party answered whole (killed, frozen or cut off during it) is made again once one is
        back, as training waits for one, for up to the run's rejoin timeout; without one by
        then nothing is chosen, and that is said."""
        fed = self.fed
        fed.choice = ValidationChoice()
        if self._nothing_held_out():
            fed.choice.heads = self._unvalidated(say=True)
            return fed.choice
        if not self._chooses():
            return fed.choice
        validation = fed.train_rows.validation
        give_up = time.monotonic() + (fed.rejoin_timeout_s or 0.0)
        backoff = Backoff(CHOOSE_AGAIN_S)
        while True:
            seen = len(fed.liveness.transitions)
            report = self._choose_once(validation)
            # a party that went down or came back during it: its candidates are not comparable
            moved = {t.block for t in fed.liveness.transitions[seen:]}
            whole = self._whole(report) and not moved & set(fed.label_blocks)
            if (whole and not moved) or time.monotonic() >= give_up:
                break
            pause = 0.0 if whole else backoff.next()  # a feature party: again at once
            log.warning(
                "validation: the choice of subsets and threshold scored %d of %d samples (%s): "
                "choosing again in %.0fs, for at most %.0fs more",
                report.scored,
                report.scored + report.unscored,
                f"block(s) {sorted(moved)} went down or came back during it"
                if whole
                else self._why(report),
                pause,
                give_up - time.monotonic(),
            )
            time.sleep(pause)
            fed.align_again_if_due("choosing again")  # a party back since: called again
            fed.liveness.retry_now(fed.tick + 1)  # a down party is asked at the next batch
        if not whole:
            fed.choice = ValidationChoice()
            log.warning(
                "validation: nothing chosen (every observed set predicted from all its parties, "
                "decision threshold 0.5): no label party answered the whole validation split "
                "within %.0fs",
                fed.rejoin_timeout_s or 0.0,
            )
        return fed.choice

    def unvalidated_from_start(self) -> None:
        """Before training: where nothing is held out, the heads that `choose` gives after it
        (`_unvalidated`), in effect from the start, so that every evaluation of the run (the
        epochs' test scores with --eval-every) scores the model it will serve."""
        if "train" in self.fed.alignments and self._nothing_held_out():
            self.fed.choice = ValidationChoice(heads=self._unvalidated(say=False))

    def _nothing_held_out(self) -> bool:
        validation = self.fed.train_rows.validation
        return validation is None or not len(validation)

    def _unvalidated(self, say: bool) -> dict[tuple[int, ...], str]:
        """The heads of each observed set where nothing was held out to choose on
        (TrainConfig.unvalidated_heads); `say`: log it."""
        fed = self.fed
        heads = unvalidated_heads(
            fed.config.unvalidated_heads,
            fed.task,
            fed.spec.blend_members,
            sorted(fed.infos),
            fed.label_blocks,
            sorted(fed.alignments["train"].patterns()),
        )
        if heads and say:
            log.info(
                "nothing held out to choose on: every observed set holding a label party is "
                "predicted with the mean of the heads' predictions (--unvalidated-heads %s)",
                fed.config.unvalidated_heads,
            )
        return heads

    def _chooses(self) -> bool:
        """Whether the run chooses anything on validation: subsets, heads or a threshold."""
        fed = self.fed
        return (fed.config.subset_choice != "plain" and self._has_subset_predictors()) or (
            self._binary_threshold()
        )

    def _binary_threshold(self) -> bool:
        fed = self.fed
        binary = fed.task != REGRESSION and fed.num_classes == 2
        return (
            fed.config.threshold in THRESHOLD_RULES and binary and fed.spec.combination == "heads"
        )

    def _why(self, report: EvalReport) -> str:
        if no_head_answered(self.fed, report):
            return "no label party answered"
        if heads_left(self.fed, report):
            return "every label party stopped answering during it"
        return "a label party went down or came back during it"

    def _whole(self, report: EvalReport) -> bool:
        """Whether a validation evaluation is the split's: not cut short, not unanswered."""
        return not heads_left(self.fed, report) and not no_head_answered(self.fed, report)

    def _choose_once(self, validation: np.ndarray) -> EvalReport:
        """One choice into fed.choice; returns the validation evaluation with the choice in
        effect (the threshold's), which tells whether the label parties answered it whole."""
        fed = self.fed
        fed.choice = choice = ValidationChoice()
        rule = fed.config.subset_choice
        if rule != "plain" and self._has_subset_predictors():
            choice.subsets, choice.heads, choice.candidates = choose_subsets(
                fed,
                validation,
                margin=rule == "validation",
                per_set=fed.config.concat_choice == "sets",
            )
            if (fed.spec.concat_head or fed.spec.linear_head) and fed.config.concat_choice == "all":
                choose_heads_pooled(fed, validation, choice, margin=rule == "validation")
        binary = self._binary_threshold()
        report = fed.evaluate("train", index=validation, federation_scores=binary)
        if binary and self._whole(report):
            rule = fed.config.threshold
            found = choose_threshold(fed, validation, str(rule), report)
            if found is not None:
                choice.threshold, tuned, plain = found
                choice.threshold_f1 = (plain, tuned)
                choice.threshold_metric = THRESHOLD_METRIC[str(rule)]
                choice.threshold_rule = AUTO_THRESHOLD if rule == "auto" else str(rule)
                log.info(
                    "validation: decision threshold %.3f by %s (%s %.4f; at 0.5: %.4f)",
                    choice.threshold,
                    choice.threshold_rule,
                    choice.threshold_metric,
                    tuned,
                    plain,
                )
        return report

    def _has_subset_predictors(self) -> bool:
        """LASER-VFL's shape: a head per label party that serves every subset containing it."""
        return self.fed.spec.has_subset_predictors

    def threshold(self) -> float | None:
        """The decision threshold of binary predictions: a configured number (0.5: the plain
        argmax, None), or the one the validation samples chose ("auto")."""
        configured = self.fed.config.threshold
        if configured in THRESHOLD_RULES:
            return self.fed.choice.threshold
        return None if configured == 0.5 else float(configured)

    def served(
        self, pattern: tuple[int, ...], blocks: Collection[int] | None
    ) -> tuple[Collection[int] | None, tuple[int, ...]]:
        """The parties a batch of `pattern` is predicted from (None: every live one) and those
        of its pattern the validation choice leaves out, for the set of them that is live now."""
        fed = self.fed
        if not fed.choice.subsets:
            return blocks, ()
        available = self._available(pattern, blocks)
        dropped = tuple(sorted(set(available) - set(fed.choice.kept(available))))
        if not dropped:
            return blocks, ()
        base = set(fed.infos) if blocks is None else set(blocks)
        return base - set(dropped), dropped

    def head(self, pattern: tuple[int, ...], blocks: Collection[int] | None) -> str:
        """The heads (PredictCall.head) a batch of `pattern` is predicted with, for the set of
        its parties that is live now: "" (the method's own) unless the validation chose another."""
        if not self.fed.choice.heads:
            return ""
        return self.fed.choice.head(self._available(pattern, blocks))

    def _available(
        self, pattern: tuple[int, ...], blocks: Collection[int] | None
    ) -> tuple[int, ...]:
        """The parties of `pattern` (among `blocks`) that would be called now."""
        fed = self.fed
        return tuple(
            b
            for b in pattern
            if (blocks is None or b in blocks) and fed.liveness.should_call(b, fed.tick)
        )
