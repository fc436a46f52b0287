"""What a label party says about its classes when it starts: how many training rows each holds,
and a warning for a class with very few. Every distinct value of a label column is a class, so
one stray value (a typo, a placeholder) silently becomes a class of its own, which the
federation then learns and every party must count (num_classes)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vfl_core.data.learning_task import REGRESSION
from vfl_core.data.missingness import UNLABELLED
from vfl_core.data.party_dir import PartyData

RARE_CLASS_ROWS = 5  # fewer training rows than this: probably not a class anyone meant


@dataclass(frozen=True)
class ClassCount:
    index: int
    name: str  # the label as written in the party's table; "" for a prepared data set
    rows: int  # in the train split

    def __str__(self) -> str:
        named = f" ({self.name!r})" if self.name else ""
        return f"{self.index}{named}: {self.rows}"


def class_counts(data: PartyData) -> list[ClassCount]:
    """Training rows per class of a classification label party; [] for anyone else."""
    train = data.splits.get("train")
    if train is None or train.labels is None or data.meta.task == REGRESSION:
        return []
    labelled = train.labels[train.labels != UNLABELLED]  # vfl prepare --labels N leaves the rest
    counts = np.bincount(labelled, minlength=data.meta.num_classes)
    names = list((data.preprocessing or {}).get("classes") or [])
    return [
        ClassCount(i, str(names[i]) if i < len(names) else "", int(n)) for i, n in enumerate(counts)
    ]


def class_mapping(data: PartyData) -> dict[str, object] | None:
    """A classification label party's classes as written in its table: its block, label column,
    each class index's name and training rows, and (binary) the positive class, index 1, what
    F1, AUC, the Brier score and the decision threshold are about. None for a party without
    named classes (feature-only, regression, a built-in data set)."""
    counts = class_counts(data)
    preprocessing = data.preprocessing or {}
    if not counts or not preprocessing.get("classes"):
        return None
    mapping: dict[str, object] = {
        "block": data.meta.block,
        "column": preprocessing.get("label_column"),
        "classes": [c.name for c in counts],
        "train_rows": [c.rows for c in counts],
    }
    if len(counts) == 2:
        mapping["positive_class"] = counts[1].name
    return mapping


def describe_mapping(mapping: dict[str, object]) -> str:
    """ "block 0 labels from 'default' (training rows per class): 0 ('no'): 523, 1 ('yes'): 130;
    positive class 'yes' (F1, AUC, Brier and the threshold are about it)"."""
    classes, rows = mapping["classes"], mapping["train_rows"]
    assert isinstance(classes, list) and isinstance(rows, list)
    pairs = enumerate(zip(classes, rows, strict=True))
    listed = ", ".join(str(ClassCount(i, name, n)) for i, (name, n) in pairs)
    text = f"block {mapping['block']} labels from {mapping['column']!r} (training rows per class)"
    text += f": {listed}"
    if "positive_class" in mapping:
        text += (
            f"; positive class {mapping['positive_class']!r} (F1, AUC, Brier and the threshold "
            "are about it)"
        )
    return text


def describe_classes(counts: list[ClassCount]) -> str:
    """ "2 classes in the train split (rows per class): 0 ('no'): 523, 1 ('yes'): 130"."""
    listed = ", ".join(map(str, counts))
    return f"{len(counts)} classes in the train split (rows per class): {listed}"


def rare_class_warnings(counts: list[ClassCount]) -> list[str]:
    """One line per class with fewer than RARE_CLASS_ROWS training rows."""
    return [
        f"class {c.index}{f' ({c.name!r})' if c.name else ''} has only {c.rows} training "
        f"row{'s' * (c.rows != 1)}: a stray label value? Every distinct value of the label "
        "column is a class, learned by the federation and counted by every party"
        for c in counts
        if c.rows < RARE_CLASS_ROWS
    ]
