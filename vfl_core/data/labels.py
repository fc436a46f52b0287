"""A label party's label column: class indices, or regression targets."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from vfl_core.data import column_values as cv
from vfl_core.data.columns import Table
from vfl_core.data.learning_task import CLASSIFICATION, REGRESSION, Task
from vfl_core.data.local_numbers import floats
from vfl_core.errors import ConfigError, DataError

log = logging.getLogger(__name__)

_FLOAT32_MAX = float(np.finfo(np.float32).max)
# Numeric labels with more classes than this are probably a regression target read as classes.
MANY_NUMERIC_CLASSES = 50
# A regression target rounded by float32 by more than this share of its standard deviation is
# warned about.
ROUNDING_SHARE = 1e-3
# How many classes an error lists (a regression target read as classes has hundreds).
LISTED_CLASSES = 10
# Regression targets this many median absolute deviations (scaled to a normal sd) from the
# median are far out; when at most FAR_TARGETS_SHARE of the rows are and they make more than
# FAR_VARIANCE_SHARE of the targets' squared deviation, squared-error training and RMSE are
# ruled by them, which is warned about (6 of 1500 targets typed x1000 give every model
# R^2 ~ 0 and the federation stops early at epoch 2, with no word why otherwise).
FAR_MADS = 20.0
FAR_TARGETS_SHARE = 0.05
FAR_VARIANCE_SHARE = 0.5
# A binary label whose positive class (index 1: the later of the sorted classes unless
# --positive-class names it) holds at least this share of the training rows is warned about:
# F1 is then about the common class (fraud/ok makes "ok", 96% of the rows, the positive
# class: F1 97.8 with nothing said of the frauds).
COMMON_POSITIVE_SHARE = 0.75


@dataclass(frozen=True)
class Labels:
    values: np.ndarray  # (n,) int64 class indices, or float32 targets for regression
    classes: tuple[str, ...]  # class index -> the label as written in the file (regression: ())


def parse_labels(
    table: Table,
    column: str,
    classes: tuple[str, ...] | None = None,
    task: Task = CLASSIFICATION,
    positive: str | None = None,
) -> Labels:
    """The one place labels are read: class indices, or regression targets, for a label column.

    Classification without `classes` (training rows): the classes are the distinct labels, sorted
    numerically when all are numbers (so "0"/"1" keep their meaning) and as text otherwise
    ("no" < "yes"), except that a binary task's `positive` class (TableSource.positive_class) is
    index 1, the class F1, AUC, the Brier score and the decision threshold are about. With
    `classes` (inference rows) a label outside them is an error.
    Regression: every label is a finite number (float32 targets, `classes` unused).
    """
    text = _present_labels(table, column)
    if task == REGRESSION:
        targets = _regression_targets(table, column, text)
        if classes is None:  # the training rows (with `classes`: inference rows, said once)
            _warn_of_far_targets(table.source, column, targets)
        return Labels(targets, ())
    fresh = classes is None  # the training rows: the classes are found here
    if classes is None:
        classes = _sorted_classes(table.source, column, text.unique().to_pylist())
        if len(classes) < 2:
            raise SingleClassError(
                f"{table.source}: label column {column!r} has a single class {classes[0]!r} "
                f"in its {len(text)} training row{'s' if len(text) != 1 else ''} "
                "(need at least two)"
            )
        _warn_if_regression_target(table.source, column, classes)
        _warn_of_case_variants(table.source, column, classes)
        if positive is not None:
            classes = positive_last(table.source, column, classes, positive)
    index = pc.index_in(text, value_set=pa.array(list(classes), pa.string()))
    if index.null_count:
        row = int(np.flatnonzero(index.is_null().to_numpy(zero_copy_only=False))[0])
        raise DataError(
            f"{table.source}: {table.row_name(row)}, column {column!r}: label "
            f"{text[row].as_py()!r} is not one of the training classes"
            f"{_listed(classes)}{_regression_hint([text[row].as_py(), *classes])}"
        )
    values = index.to_numpy(zero_copy_only=False).astype(np.int64)
    if fresh and positive is None and len(classes) == 2:
        _warn_if_positive_is_common(table.source, column, classes, values)
    return Labels(values, classes)


def _warn_if_positive_is_common(
    source: str, column: str, classes: tuple[str, ...], values: np.ndarray
) -> None:
    share = float(np.mean(values == 1))
    if share < COMMON_POSITIVE_SHARE:
        return
    log.warning(
        "%s: label column %r: the positive class %r (the later of the sorted classes, what F1, "
        "AUC, the Brier score and the decision threshold are about) holds %.1f%% of the "
        "training rows, %r %.1f%%: F1 is about the common class; --positive-class %s makes "
        "them about the rare one",
        source,
        column,
        classes[1],
        100 * share,
        classes[0],
        100 * (1 - share),
        classes[0],
    )


def positive_last(
    source: str, column: str, classes: tuple[str, ...], positive: str
) -> tuple[str, ...]:
    """A binary task's classes with `positive` as index 1 (the positive class of every binary
    metric and of the threshold)."""
    if len(classes) != 2:
        raise ConfigError(
            f"--positive-class {positive!r}: {source}: label column {column!r} has "
            f"{len(classes)} classes; it applies to a binary label"
        )
    if positive not in classes:
        raise ConfigError(
            f"--positive-class {positive!r}: {source}: label column {column!r} has the classes "
            f"{classes[0]!r} and {classes[1]!r}"
        )
    return (classes[0] if classes[1] == positive else classes[1], positive)


class SingleClassError(DataError):
    """The training rows' labels are one class (vfl_core.data.tabular says what the test split
    holds)."""


def _present_labels(table: Table, column: str) -> pa.ChunkedArray:
    """The label cells as text, refusing an empty cell or a table without rows."""
    if not len(table):
        raise DataError(f"{table.source}: no rows, so no labels in column {column!r}")
    cells = table.column(column)
    if cells.null_count:
        first = int(np.flatnonzero(cv.missing(cells))[0])
        raise DataError(
            f"{table.source}: {table.row_name(first)}, column {column!r}: no label "
            f"({cells.null_count} of {len(cells)} rows have none). A label party's table needs "
            "a label in every row: leave the samples whose label is unknown out of it"
        )
    if cv.is_text(cells):
        return cells
    return pa.chunked_array([pa.array(cv.text_cells(cells), pa.string())])


def _regression_targets(table: Table, column: str, text: pa.ChunkedArray) -> np.ndarray:
    # float32 is what the model trains on: a target beyond its range would become inf
    def fits(cell: str) -> bool:
        return cv.finite_number(cell) and abs(float(cell)) <= _FLOAT32_MAX

    values = floats(text)
    if values is None or not (np.isfinite(values) & (np.abs(values) <= _FLOAT32_MAX)).all():
        row = cv.first_bad_row(text, fits) or 0
        raise DataError(
            f"{table.source}: {table.row_name(row)}, column {column!r}: {text[row].as_py()!r} is "
            f"not a finite number (a regression label must be one)"
        )
    targets = values.astype(np.float32)
    _warn_if_rounded(table.source, column, values, targets)
    return targets


def _warn_if_rounded(source: str, column: str, values: np.ndarray, targets: np.ndarray) -> None:
    """Targets far from 0 for their spread (a timestamp, 1.7e9 +- 100) lose their differences
    as float32 (steps of 128 there): the federation learns and is scored on rounded labels.
    Said with the size of the rounding and the cure, not silently."""
    spread = float(values.std())
    rounded = float(np.abs(targets.astype(np.float64) - values).max())
    if spread > 0 and rounded > ROUNDING_SHARE * spread:
        log.warning(
            "%s: label column %r: as 32-bit floats (what the model trains on) its values are "
            "rounded by up to %.3g, %.1f%% of their standard deviation %.3g; subtract a "
            "constant near their mean %.6g (or change units) to keep them",
            source,
            column,
            rounded,
            100 * rounded / spread,
            spread,
            float(values.mean()),
        )


def _warn_of_far_targets(source: str, column: str, targets: np.ndarray) -> None:
    """A few targets far from the rest (typing errors, a heavy tail) that make most of the
    variance rule the squared error the model trains on, the validation RMSE early stopping
    watches and the RMSE reported. Said with their count, values and share, not refused (they
    may be real)."""
    values = targets.astype(np.float64)
    distance = np.abs(values - np.median(values))
    scale = 1.4826 * float(np.median(distance))
    squared = (values - values.mean()) ** 2
    if scale <= 0 or squared.sum() <= 0:
        return
    far = distance > FAR_MADS * scale
    share = float(squared[far].sum() / squared.sum())
    if not far.any() or far.mean() > FAR_TARGETS_SHARE or share <= FAR_VARIANCE_SHARE:
        return
    shown = ", ".join(f"{v:.6g}" for v in values[far][np.argsort(-distance[far])][:5])
    log.warning(
        "%s: label column %r: %d of %d training targets lie more than %g median absolute "
        "deviations from the median %.6g (%s%s) and make %.1f%% of the targets' variance: "
        "the squared error the model trains on, the validation RMSE and the RMSE reported "
        "are ruled by them; check them (typing errors?), leave them out, or predict a "
        "transform of the target (a log)",
        source,
        column,
        int(far.sum()),
        len(values),
        FAR_MADS,
        float(np.median(values)),
        shown,
        ", ..." if far.sum() > 5 else "",
        100 * share,
    )


def _sorted_classes(source: str, column: str, labels: list[str]) -> tuple[str, ...]:
    if cv.all_finite_numbers(labels):
        _refuse_one_number_two_ways(source, column, labels)
        return tuple(sorted(labels, key=lambda label: (float(label), label)))
    return tuple(sorted(labels))


def _refuse_one_number_two_ways(source: str, column: str, labels: list[str]) -> None:
    """Labels that are all numbers but write one number two ways ("1" and "1.0", as two
    systems' exports do) would be two classes: a binary task silently learned as three. Refused,
    naming the spellings, rather than guessing which one a class is called."""
    spellings: dict[float, list[str]] = {}
    for label in labels:
        spellings.setdefault(float(label), []).append(label)
    same = [sorted(s) for s in spellings.values() if len(s) > 1]
    if same:
        raise DataError(
            f"{source}: label column {column!r} writes the same number in different ways "
            f"({'; '.join(' and '.join(map(repr, s)) for s in same)}): each would be a class "
            "of its own; write every class one way"
        )


def _listed(classes: tuple[str, ...]) -> str:
    """ " ['a', 'b']", or the first LISTED_CLASSES and how many there are."""
    if len(classes) <= LISTED_CLASSES:
        return f" {list(classes)}"
    return f" ({len(classes)}: {', '.join(map(repr, classes[:LISTED_CLASSES]))}, ...)"


def _regression_hint(labels: list[str]) -> str:
    """Said where the labels are all numbers and many: a price read as classes."""
    if len(labels) > MANY_NUMERIC_CLASSES and cv.all_finite_numbers(labels):
        return "; the labels are numbers: for a regression target give --task regression"
    return ""


def _warn_if_regression_target(source: str, column: str, classes: tuple[str, ...]) -> None:
    """Many classes, all numbers: probably a regression target without --task regression,
    which would be learned as that many classes. Said, not refused (codes can be classes)."""
    if len(classes) > MANY_NUMERIC_CLASSES and cv.all_finite_numbers(list(classes)):
        log.warning(
            "%s: label column %r has %d classes, all numbers: a regression target needs "
            "--task regression (else every distinct value is a class of its own)",
            source,
            column,
            len(classes),
        )


def _warn_of_case_variants(source: str, column: str, classes: tuple[str, ...]) -> None:
    """Classes that differ only in case ("yes", "Yes": two exports, or a hand-typed row) are
    classes of their own, so a binary task would be learned as three. Said, not merged: the
    table's owner knows whether they are one class."""
    spellings: dict[str, list[str]] = {}
    for label in classes:
        spellings.setdefault(label.casefold(), []).append(label)
    for same in (s for s in spellings.values() if len(s) > 1):
        log.warning(
            "%s: label column %r has classes %s that differ only in case: each is a class of "
            "its own; write them one way if they are one class",
            source,
            column,
            " and ".join(map(repr, same)),
        )
