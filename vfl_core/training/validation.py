"""What the held-out validation samples decide (vfl_core.training.early_stop): after each epoch,
whether it is the best so far (the parties keep their state) and whether to stop; at the end of
training, going back to the best epoch, then the subsets each observed set is predicted from and
the decision threshold (vfl_core.inference.choice), which every later prediction uses.

Part of the round engine (vfl_core.training.engine.Federation composes it).
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import TYPE_CHECKING

from vfl_core.config import THRESHOLD_RULES
from vfl_core.data.learning_task import REGRESSION
from vfl_core.inference.choice import (
    THRESHOLD_METRIC,
    ValidationChoice,
    choose_heads_pooled,
    choose_subsets,
    choose_threshold,
)
from vfl_core.methods.liveness import DOWN

if TYPE_CHECKING:
    from vfl_core.training.engine import Federation

log = logging.getLogger(__name__)


class Validator:
    """Early stopping after each epoch, and the validation choice after training."""

    def __init__(self, fed: Federation) -> None:
        self.fed = fed

    # ------------------------------------------------------------------ early stopping
    def stop_early(self) -> bool:
        """After an epoch: score the validation samples; the parties keep their state when it
        is the best epoch so far. True when `patience` epochs passed without a better one."""
        fed = self.fed
        stop, validation = fed.early_stop, fed.train_rows.validation
        if stop is None or validation is None:
            return False
        epoch, last_round = fed.cursor.epoch - 1, fed.round_id - 1
        report = fed.evaluate("train", index=validation)
        value = getattr(report.overall(), stop.metric) if report.scored else None
        if stop.observe(epoch, value, last_round):
            blocks = [b for b in sorted(fed.infos) if fed.liveness.state.get(b) != DOWN]
            stop.kept = sorted(fed.transport.snapshot(last_round, blocks, restore=False))
        log.info(
            "epoch %d: validation %s %s (best %.4f at epoch %d)",
            epoch + 1,
            stop.metric,
            "none scored" if value is None else f"{value:.4f}",
            stop.best_value,
            stop.best_epoch + 1,
        )
        if stop.due and fed.cursor.epoch < fed.config.epochs:
            stop.stopped_epoch = epoch
            return True
        return False

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
        subset predictors."""
        fed = self.fed
        fed.choice = choice = ValidationChoice()
        validation = fed.train_rows.validation
        if validation is None or not len(validation):
            return choice
        rule = fed.config.subset_choice
        if rule != "plain" and self._has_subset_predictors():
            choice.subsets, choice.heads, choice.candidates = choose_subsets(
                fed,
                validation,
                margin=rule == "validation",
                per_set=fed.config.concat_choice == "sets",
            )
            if fed.spec.concat_head and fed.config.concat_choice == "all":
                choose_heads_pooled(fed, validation, choice, margin=rule == "validation")
        binary = fed.task != REGRESSION and fed.num_classes == 2
        rule = fed.config.threshold
        if rule in THRESHOLD_RULES and binary and fed.spec.combination == "heads":
            found = choose_threshold(fed, validation, str(rule))
            if found is not None:
                choice.threshold, tuned, plain = found
                choice.threshold_f1 = (plain, tuned)
                choice.threshold_metric = THRESHOLD_METRIC[str(rule)]
                log.info(
                    "validation: decision threshold %.3f (%s %.4f; at 0.5: %.4f)",
                    choice.threshold,
                    choice.threshold_metric,
                    tuned,
                    plain,
                )
        return choice

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
