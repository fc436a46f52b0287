"""The latent-variable VFL's round program, driven in one process (the in-process transport).

The coordinator's side: align the parties' samples, plan single-pattern batches from the seed
(vfl_core.alignment, as for LASER-VFL), and run Encode, Sample, Decode and Update for stage 1
over every training sample, then stage 2 over the active party's labelled rows, then SNIS
prediction. The coordinator sees experts' shapes and the batch plan only: values pass between
parties (vfl_core.dlvm), and the active party is the lowest block holding labels.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from tqdm import tqdm

from vfl_core.alignment import DEMO_SECRET, Alignment, Batch, epoch_plan, eval_plan, hash_ids
from vfl_core.data import PartyData, check_federation
from vfl_core.dlvm import Decoded, DlvmParty
from vfl_core.dlvm_models import DlvmConfig
from vfl_core.errors import ConfigError, DataError

log = logging.getLogger(__name__)

STAGE_BOUND, STAGE_CLASSIFIER, STAGE_PREDICT = 1, 2, 3  # first part of a noise stream's name


@dataclass
class DlvmEvaluation:
    """Correct and scored samples, overall and by observed pattern."""

    correct: dict[tuple[int, ...], int] = field(default_factory=dict)
    samples: dict[tuple[int, ...], int] = field(default_factory=dict)

    def add(self, pattern: tuple[int, ...], correct: int, samples: int) -> None:
        self.correct[pattern] = self.correct.get(pattern, 0) + correct
        self.samples[pattern] = self.samples.get(pattern, 0) + samples

    @property
    def accuracy(self) -> float:
        total = sum(self.samples.values())
        return sum(self.correct.values()) / total if total else float("nan")

    def to_json(self) -> dict[str, object]:
        return {
            "accuracy": self.accuracy,
            "samples": sum(self.samples.values()),
            "by_pattern": {
                ",".join(map(str, p)): {"samples": n, "accuracy": self.correct[p] / n}
                for p, n in sorted(self.samples.items(), key=lambda kv: (-len(kv[0]), kv[0]))
            },
        }


@dataclass
class DlvmFederation:
    parties: dict[int, DlvmParty]
    config: DlvmConfig
    seed: int
    batch_size: int = 64
    eval_batch_size: int = 512
    progress: bool = False
    round_id: int = 0
    alignments: dict[str, Alignment] = field(default_factory=dict)
    losses: dict[str, list[float]] = field(default_factory=dict)  # stage -> loss per epoch

    @property
    def active(self) -> DlvmParty:
        return next(p for _, p in sorted(self.parties.items()) if p.active is not None)

    def align(self, split: str) -> Alignment:
        secret = DEMO_SECRET.encode()
        hashes = {
            b: hash_ids(p.data.splits[split].ids.tolist(), secret)
            for b, p in self.parties.items()
            if split in p.data.splits
        }
        self.alignments[split] = Alignment.build(hashes)
        return self.alignments[split]

    # ------------------------------------------------------------------ training
    def train(self) -> None:
        al = self.align("train")
        self.losses["bound"] = [
            self._epoch(epoch_plan(al, self.seed, e, self.batch_size), self._bound_round, e)
            for e in range(self.config.stage1_epochs)
        ]
        labelled = self._labelled(al)
        start = self.config.stage1_epochs
        self.losses["classifier"] = [
            self._epoch(
                epoch_plan(labelled, self.seed, start + e, self.batch_size),
                lambda batch: self._classifier_round(labelled, batch),
                start + e,
            )
            for e in range(self.config.stage2_epochs)
        ]

    def _epoch(self, plan: list[Batch], run, epoch: int) -> float:
        started = time.perf_counter()
        losses = [run(batch) for batch in tqdm(plan, disable=not self.progress, leave=False)]
        log.info(
            "dlvm epoch %d: %d rounds, mean loss %.4f, %.1fs",
            epoch + 1,
            len(plan),
            float(np.mean(losses)) if losses else float("nan"),
            time.perf_counter() - started,
        )
        return float(np.mean(losses)) if losses else float("nan")

    def _bound_round(self, batch: Batch) -> float:
        """Stage 1 on one batch (every sample counts, labelled or not)."""
        al, round_id = self.alignments["train"], self._next_round()
        rows = {b: al.rows_of(b, batch.index) for b in batch.pattern}
        experts = {b: self.parties[b].encode(round_id, "train", r, True) for b, r in rows.items()}
        active = self.active.active
        assert active is not None
        h = active.sample((STAGE_BOUND, round_id), experts, self.config.kappa, train=True)
        answers = {
            b: self.parties[b].decode(round_id, "train", rows.get(b), h, True)
            for b in self._decoders(batch.pattern)
        }
        loss, grads = active.bound_step(answers)
        for b, g in sorted(grads.items()):
            self.parties[b].update(round_id, g)
        return loss

    def _classifier_round(self, labelled: Alignment, batch: Batch) -> float:
        """Stage 2 on one batch of the active party's labelled rows: the classifier trains and
        the parties holding the batch fine-tune their encoders (decoders stay fixed)."""
        round_id = self._next_round()
        draw = (STAGE_CLASSIFIER, round_id)
        answers = self._posterior(labelled, "train", batch, draw, self.config.kappa, train=True)
        active = self.active
        assert active.active is not None
        rows = labelled.rows_of(active.block, batch.index)
        loss, grads = active.active.classifier_step(answers, rows)
        for b, g in sorted(grads.items()):
            self.parties[b].update(round_id, g)
        return loss

    def _posterior(
        self,
        al: Alignment,
        split: str,
        batch: Batch,
        draw: tuple[int, ...],
        samples: int,
        train: bool = False,
    ) -> dict[int, Decoded]:
        """Encode (training: keep the encoders' graphs), sample, and decode without training:
        the parties' answers."""
        rows = {b: al.rows_of(b, batch.index) for b in batch.pattern}
        experts = {b: self.parties[b].encode(draw[1], split, r, train) for b, r in rows.items()}
        active = self.active.active
        assert active is not None
        h = active.sample(draw, experts, samples, train=train)
        answers = {
            b: self.parties[b].decode(draw[1], split, rows.get(b), h, False)
            for b in self._decoders(batch.pattern)
        }
        return answers

    def _decoders(self, pattern: Sequence[int]) -> list[int]:
        """Who answers Decode: the blocks holding the batch; with MNAR every party (a party
        without the batch still models that it misses it)."""
        return sorted(self.parties) if self.config.mnar else list(pattern)

    def _labelled(self, al: Alignment) -> Alignment:
        """The alignment restricted to samples whose label the active party holds."""
        active = self.active
        assert active.active is not None
        rows = al.rows[active.block]
        keep = np.flatnonzero(np.isin(rows, active.active.labelled_rows()))
        if self.config.stage2_epochs and len(keep) == 0:
            raise DataError(f"the active party (block {active.block}) holds no labelled row")
        return Alignment(
            keys=tuple(al.keys[i] for i in keep), rows={b: r[keep] for b, r in al.rows.items()}
        )

    def _next_round(self) -> int:
        self.round_id += 1
        return self.round_id

    # ------------------------------------------------------------------ inference
    def predict(self, split: str, batch: Batch) -> np.ndarray:
        """SNIS class probabilities (B, C) for one batch of ``split``."""
        draw = (STAGE_PREDICT, self._next_round())
        answers = self._posterior(
            self.alignments[split], split, batch, draw, self.config.predict_samples
        )
        active = self.active.active
        assert active is not None
        return active.predict(answers)

    def evaluate(self, split: str = "test") -> DlvmEvaluation:
        """Accuracy of the SNIS prediction on every sample some party holds, by pattern; each
        sample scored with the label a label party holds for it."""
        al = self.align(split)
        result = DlvmEvaluation()
        for batch in eval_plan(al, self.eval_batch_size):
            predicted = self.predict(split, batch).argmax(axis=1)  # (B,)
            labels = self._labels(al, split, batch)
            scored = labels >= 0
            result.add(batch.pattern, int((predicted == labels)[scored].sum()), int(scored.sum()))
        return result

    def _labels(self, al: Alignment, split: str, batch: Batch) -> np.ndarray:
        """Each sample's label from the first label party holding it (-1: none)."""
        labels = np.full(len(batch.index), -1, dtype=np.int64)
        for b, party in sorted(self.parties.items()):
            own = party.data.splits[split].labels if split in party.data.splits else None
            if own is None:
                continue
            rows = al.rows[b][batch.index]
            fill = (rows >= 0) & (labels < 0)
            labels[fill] = own[rows[fill]]
        return labels


def build_federation(
    data: Sequence[PartyData],
    config: DlvmConfig,
    seed: int,
    batch_size: int = 64,
    progress: bool = False,
) -> DlvmFederation:
    """The parties of one latent-variable federation; the lowest label block is active."""
    check_federation(list(data))
    if any(d.meta.task != "classification" for d in data):
        raise ConfigError("the latent-variable VFL (dlvm) is for classification tasks")
    active = min(d.meta.block for d in data if d.meta.has_labels)
    parties = {d.meta.block: DlvmParty(d, config, seed, d.meta.block == active) for d in data}
    return DlvmFederation(parties, config, seed, batch_size, progress=progress)
