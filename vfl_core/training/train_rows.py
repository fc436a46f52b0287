"""Which of the aligned training samples train, and how often: the validation samples held out
of the plan for early stopping (vfl_core.training.early_stop.hold_out), the class weights of
balanced resampling, and the plan of every epoch cut from what is left.

Part of the round engine (vfl_core.training.engine.Federation composes it); the aligner
(vfl_core.training.aligner) asks it again after every alignment of the train split.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from vfl_core.config import AUTO_MIN_VALIDATION, AUTO_SMALL_EPOCHS
from vfl_core.data.batch_plan import Batch, epoch_plan
from vfl_core.data.learning_task import REGRESSION
from vfl_core.errors import ConfigError
from vfl_core.training.early_stop import hold_out
from vfl_core.training.strata import hold_out_stratified

if TYPE_CHECKING:
    from vfl_core.training.ports import RowsRun

log = logging.getLogger(__name__)


class TrainRows:
    """The train alignment's key indices that train and that validate, and their weights."""

    def __init__(self, fed: RowsRun) -> None:
        self.fed = fed
        # With TrainConfig.early_stop_patience: the train alignment's key indices that train
        # and that are held out for validation (None: every sample trains).
        self.training: np.ndarray | None = None
        self.validation: np.ndarray | None = None
        self.weights: np.ndarray | None = None  # per key, with balance "resample"
        # The epochs a run trains at most, below TrainConfig.epochs: AUTO_SMALL_EPOCHS where
        # the default early stopping is off for want of validation samples (None: no limit)
        self.epoch_limit: int | None = None

    def hold_out(self) -> None:
        """Hold out the validation samples (of those a label party holds) from the plan; by
        default (patience None) only where they are AUTO_MIN_VALIDATION or more, else early
        stopping is off, nothing is held out, and the run ends after AUTO_SMALL_EPOCHS epochs:
        with nothing to stop on, a table that small overfits over the whole ceiling."""
        fed = self.fed
        assert fed.early_stop is not None
        al = fed.alignments["train"]
        scorable = np.zeros(len(al), dtype=bool)
        for index in al.groups().values():  # samples some party holds features of
            scorable[index] = True
        labelled = [al.rows[b] >= 0 for b in fed.label_blocks if b in al.rows]
        scorable &= np.any(labelled, axis=0) if labelled else False
        auto = fed.config.early_stop_patience is None
        try:
            self.training, self.validation = self._split(scorable)
        except ConfigError:
            if not auto:
                raise
            self.training, self.validation = None, np.zeros(0, dtype=np.int64)
        if auto and len(self.validation) < AUTO_MIN_VALIDATION:
            self.epoch_limit = min(AUTO_SMALL_EPOCHS, fed.config.epochs)
            log.info(
                "early stopping off: %d validation samples, fewer than the %d the default needs "
                "(--early-stop-patience N holds them out anyway); %d epochs train "
                "(--early-stop-patience 0: all %d)",
                len(self.validation),
                AUTO_MIN_VALIDATION,
                self.epoch_limit,
                fed.config.epochs,
            )
            fed.early_stop = self.training = self.validation = None
            return
        fed.early_stop.validation_samples = len(self.validation)
        log.info(
            "early stopping: %d of %d training samples held out for validation (patience %d)",
            len(self.validation),
            len(al),
            fed.early_stop.patience,
        )

    def _split(self, scorable: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(training, validation) key indices: the seed's draw, or with validation_split
        "stratified" (classification) the label parties' stratified draws
        (vfl_core.training.strata)."""
        config = self.fed.config
        drawn = hold_out(scorable, config.seed, config.validation_fraction)  # checks the sizes
        draw = self._strata(scorable) if config.validation_split == "stratified" else None
        if draw is None:
            return drawn
        return hold_out_stratified(scorable, draw, config.validation_fraction)

    def _strata(self, scorable: np.ndarray) -> np.ndarray | None:
        """Per key, the stratified draw of the lowest label block holding it; None (the seed's
        draw instead) for regression or where a candidate has none."""
        fed = self.fed
        al = fed.alignments["train"]
        blocks = sorted(b for b, i in fed.infos.items() if i.has_labels and b in al.rows)
        if not blocks or any(fed.infos[b].task == REGRESSION for b in blocks):
            log.info("validation split: regression, drawn at random (not stratified)")
            return None
        draw = np.full(len(al), np.nan)
        for block in blocks:
            got = fed.transport.validation_strata(block)
            if got is None or len(got) != fed.infos[block].samples.get("train", 0):
                log.warning("validation draws of block %d missing or of the wrong size", block)
                continue
            rows = al.rows[block]
            fill = (rows >= 0) & np.isnan(draw)
            draw[fill] = got[rows[fill]]
        if np.isnan(draw[scorable]).any():
            log.warning("validation split: a label party sent no draws; drawn at random")
            return None
        return draw

    def class_weights(self) -> np.ndarray:
        """Per-key weights from the label parties (lowest block first that holds each sample)."""
        fed = self.fed
        al = fed.alignments["train"]
        weights = np.full(len(al), np.nan)
        for block in sorted(b for b, i in fed.infos.items() if i.has_labels and b in al.rows):
            w = fed.transport.class_weights(block, "train")
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
        rows = self.fed.infos[block].samples.get("train", 0)
        if len(weights) != rows:
            fault = f"{len(weights)} weights for its {rows} rows"
        elif not (np.isfinite(weights).all() and (weights >= 0).all()):
            fault = "weights that are not finite and non-negative"
        else:
            return True
        log.warning("class weights of block %d refused: %s", block, fault)
        return False

    def batch_size(self) -> int:
        """Samples per round (TrainConfig.batch_rows): "auto" from the samples the plan holds,
        which both transports agree on (the same alignment and validation hold-out)."""
        fed = self.fed
        rows = len(fed.alignments["train"]) if self.training is None else len(self.training)
        return fed.config.batch_rows(rows, fed.tabular)

    def plan(self, epoch: int) -> list[Batch]:
        """Every training sample once, in single-pattern batches (weighted if resampling);
        without the samples held out for validation (vfl_core.training.early_stop)."""
        al, weights, keep = self.fed.alignments["train"], self.weights, self.training
        seed, size = self.fed.config.seed, self.batch_size()
        if keep is None:
            return epoch_plan(al, seed, epoch, size, weights)
        # Without the validation samples; batch indices back into the whole train alignment.
        part = None if weights is None else weights[keep]
        plan = epoch_plan(al.subset(keep), seed, epoch, size, part)
        return [replace(b, index=keep[b.index]) for b in plan]
