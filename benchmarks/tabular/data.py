"""One table and seed of `vfl bench tabular` made ready for every row: the party CSV files, the
parties as the project reads them (`vfl_core.data.tabular`, as `vfl simulate --data` reads tables),
and the same rows joined back into one table for the centralised baselines.

The split is the federation's own: training rows are party 0's training IDs (it holds the
labels), test rows its test IDs (by ID hash); a row's observed set is the parties holding it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.tabular.tables import (
    ID_COLUMN,
    LABEL_BLOCK,
    LABEL_COLUMN,
    Split,
    Table,
    write_parties,
)
from vfl_core.data.learning_task import CLASSIFICATION, REGRESSION, Task
from vfl_core.data.party_dir import PartyData
from vfl_core.data.tabular import federation_sources, load_table_federation
from vfl_core.inference.metrics import f1_from_confusion


@dataclass(frozen=True)
class Prepared:
    table: Table
    seed: int
    split: Split
    parties: list[PartyData]  # block order
    train_rows: np.ndarray  # row numbers of the table (= IDs) with labels, training split
    test_rows: np.ndarray
    classes: tuple[str, ...]  # sorted class names (classification)

    @property
    def task(self) -> str:
        return self.table.task

    def labels(self, rows: np.ndarray) -> np.ndarray:
        """Class indices (classification) or values of the table's rows."""
        if self.task == CLASSIFICATION:
            lookup = {c: i for i, c in enumerate(self.classes)}
            return np.array([lookup[v] for v in self.table.label[rows]], dtype=np.int64)
        return self.table.label[rows].astype(np.float64)

    def observed(self, rows: np.ndarray) -> list[str]:
        """Each row's observed set ("0,2")."""
        return [set_name(np.flatnonzero(self.split.held[:, i]).tolist()) for i in rows]


def prepare(
    table: Table,
    seed: int,
    directory: Path,
    overlap: str = "partial",
    blocks: tuple[tuple[str, ...], ...] | None = None,
) -> Prepared:
    split = write_parties(table, seed, directory, overlap, blocks)
    sources = federation_sources(
        list(split.paths),
        None,
        id_column=ID_COLUMN,
        label_column=LABEL_COLUMN,
        label_blocks=(LABEL_BLOCK,),
        task=table.task,
    )
    parties = load_table_federation(sources)
    label_party = parties[LABEL_BLOCK].splits
    rows = {
        name: np.array([int(i) for i in s.ids], dtype=np.int64) for name, s in label_party.items()
    }
    classes = tuple(sorted({str(v) for v in table.label})) if table.task == CLASSIFICATION else ()
    return Prepared(table, seed, split, parties, rows["train"], rows["test"], classes)


def raw_columns(prep: Prepared, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The joined table's cells of `rows` as a party would have sent them: (numeric float with
    NaN where the holding party misses the row, categorical object with None)."""
    owner = {c: k for k, block in enumerate(prep.split.blocks) for c in block}
    numeric, categorical = [], []
    for name, column in prep.table.columns.items():
        held = prep.split.held[owner[name], rows]
        if name in prep.table.categorical:
            categorical.append(np.where(held, column[rows], None))
        else:
            numeric.append(np.where(held, column[rows], np.nan))
    num = np.stack(numeric, axis=1).astype(np.float64) if numeric else np.zeros((len(rows), 0))
    cat = np.stack(categorical, axis=1) if categorical else np.zeros((len(rows), 0), dtype=object)
    return num, cat


def party_features(prep: Prepared, rows: np.ndarray) -> tuple[np.ndarray, tuple[int, ...]]:
    """The parties' own preprocessed features of `rows` side by side (zeros, and code 0, where a
    party misses a row), then K - 1 indicators of a missing feature-only block: dense columns
    first, every party's category codes last (the order the tabular model expects); and the
    codes' cardinalities."""
    dense, codes, cards = [], [], []
    for k, party in enumerate(prep.parties):
        block = party_block(prep, k, rows)
        n_codes = len(party.meta.categorical)
        dense.append(block[:, : block.shape[1] - n_codes])
        codes.append(block[:, block.shape[1] - n_codes :])
        cards += list(party.meta.categorical)
        if k != LABEL_BLOCK:
            dense.append((~prep.split.held[k, rows]).astype(np.float32)[:, None])
    return np.concatenate(dense + codes, axis=1), tuple(cards)


def party_block(prep: Prepared, k: int, rows: np.ndarray) -> np.ndarray:
    """Party k's own preprocessed features of `rows` (dense columns, then its category codes, as
    its representation model reads them); zeros where it misses a row."""
    party = prep.parties[k]
    split_rows = {}
    for s in party.splits.values():
        split_rows.update({i: s.features[j] for j, i in enumerate(s.ids[: len(s.features)])})
    block = np.zeros((len(rows), party.meta.feature_shape[0]), dtype=np.float32)
    for j, i in enumerate(str(r) for r in rows):
        if i in split_rows:
            block[j] = split_rows[i]
    return block


# --------------------------------------------------------------------------------------- scores
# Scores of `vfl bench tabular`'s rows, overall and per observed set, with the federation's
# definitions: binary F1 is class 1's (the second of the sorted class names), multi-class F1 the
# unweighted mean over classes; AUC is binary ROC AUC (one-vs-rest, macro, for several classes);
# Brier is the mean over rows of the squared distance between the probabilities and the one-hot
# label; R^2 is 1 - MSE / variance of the scored labels.

Scores = dict[str, float | int | None]
ALL = "all"


def set_name(blocks: Sequence[int]) -> str:
    """An observed set as the federation's tables write it: "0,2"."""
    return ",".join(str(b) for b in sorted(blocks))


def score_sets(
    task: Task, y: np.ndarray, predicted: np.ndarray, sets: Sequence[str]
) -> dict[str, Scores]:
    """Scores of every observed set (rows grouped by `sets`) and of all rows (ALL).
    `predicted`: (n, classes) probabilities, or (n,) values in regression."""
    names = np.array(sets)
    out = {ALL: score(task, y, predicted)}
    for name in sorted(set(sets), key=lambda s: (-len(s), s)):
        rows = names == name
        out[name] = score(task, y[rows], predicted[rows])
    return out


def score(task: Task, y: np.ndarray, predicted: np.ndarray) -> Scores:
    if task == REGRESSION:
        return _regression(y.astype(np.float64), predicted.astype(np.float64))
    return _classification(y.astype(np.int64), predicted.astype(np.float64))


def _regression(y: np.ndarray, predicted: np.ndarray) -> Scores:
    error = predicted - y
    mse = float(np.mean(error**2))
    variance = float(np.var(y))
    return {
        "samples": len(y),
        "rmse": float(np.sqrt(mse)),
        "mae": float(np.mean(np.abs(error))),
        "r2": 1.0 - mse / variance if variance > 0 else None,
    }


def _classification(y: np.ndarray, proba: np.ndarray) -> Scores:
    from sklearn.metrics import roc_auc_score

    classes = proba.shape[1]
    chosen = proba.argmax(axis=1)
    confusion = np.zeros((classes, classes), dtype=np.int64)
    np.add.at(confusion, (y, chosen), 1)
    onehot = np.eye(classes)[y]
    auc = None
    present = np.unique(y)
    if len(present) == classes == 2:
        auc = float(roc_auc_score(y, proba[:, 1]))
    elif len(present) == classes:
        auc = float(roc_auc_score(y, proba, multi_class="ovr", average="macro"))
    return {
        "samples": len(y),
        "accuracy": float(np.mean(chosen == y)),
        "f1": f1_from_confusion(confusion),
        "auc": auc,
        "brier": _brier(proba, onehot),
        "positive_rate": float(np.mean(chosen == 1)) if classes == 2 else None,
        "true_positive_rate": float(np.mean(y == 1)) if classes == 2 else None,
    }


def _brier(proba: np.ndarray, onehot: np.ndarray) -> float:
    """Binary: the mean squared error of the positive-class probability (scikit-learn's
    brier_score_loss, and the federation's own `brier`, so the rows compare); more classes: the
    squared error summed over the classes (Brier's definition; the federation reports none)."""
    if proba.shape[1] == 2:
        return float(np.mean((proba[:, 1] - onehot[:, 1]) ** 2))
    return float(np.mean(np.sum((proba - onehot) ** 2, axis=1)))
