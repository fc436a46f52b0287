"""A party from its own table: a CSV or Parquet file with an ID column, features, maybe labels.

The party reads its file, fits its preprocessing (vfl_core.data.preprocess) on its training rows
only,
and becomes an in-memory `PartyData` like a prepared party directory. Train and test rows come
from two files (`test_path`) or from one file split by ID: a row is a test row when a hash of its
ID falls below `test_fraction` (vfl_core.data.sample_ids.in_test), so every party puts a
shared ID in the same split without any communication. IDs are the ID column's strings, numbers
with a zero fraction written without it (vfl_core.data.sample_ids); alignment by HMAC or PSI
matches them across parties, whatever part of them each party holds.
"""

from __future__ import annotations

import itertools
import logging
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from vfl_core.atomic_files import write_text_atomically
from vfl_core.data.chosen_columns import feature_columns
from vfl_core.data.columns import Table
from vfl_core.data.csv_pieces import ColumnWatch
from vfl_core.data.fit_warnings import fit_warnings
from vfl_core.data.fitted_options import check_against_fit
from vfl_core.data.id_hashing import SplitKeysWhileReading
from vfl_core.data.labels import Labels, SingleClassError, parse_labels
from vfl_core.data.learning_task import CLASSIFICATION, REGRESSION, Task
from vfl_core.data.party_dir import PartyData, PartyMeta, PartySplit
from vfl_core.data.preprocess import DEFAULT_MAX_ONEHOT, TabularPreprocessor
from vfl_core.data.sample_ids import (
    check_unique,
    id_array,
    in_test,
    normalised_ids,
)
from vfl_core.data.table_files import column_names, read_table
from vfl_core.data.table_source import DEFAULT_DATASET as DEFAULT_DATASET
from vfl_core.data.table_source import DEFAULT_TEST_FRACTION as DEFAULT_TEST_FRACTION
from vfl_core.data.table_source import TableSource
from vfl_core.errors import ConfigError, DataError

log = logging.getLogger(__name__)

# ---------------------------------------------------------------- building the party


def load_table_party(
    source: TableSource, fitted: TabularPreprocessor | None = None
) -> tuple[PartyData, TabularPreprocessor]:
    """The party's data and its preprocessing: `fitted` reused as is, or fitted on the
    training rows."""
    if source.block >= source.num_blocks:
        raise ConfigError(f"block {source.block} out of range (num_blocks is {source.num_blocks})")
    if fitted is not None:
        check_against_fit(source, fitted)
    label_column = fitted.label_column if fitted is not None else source.label_column
    splits = _read_splits(source, label_column, fitted)
    columns = (
        [c.name for c in fitted.columns]
        if fitted is not None
        else feature_columns(source, splits["train"])
    )
    label_only: dict[str, int] = {}
    if label_column is not None:  # a label party's rows without any feature: label-only, last
        splits, label_only = _label_only_last(splits, columns)
    warnings: tuple[str, ...] = ()
    if fitted is None:
        train = splits["train"]
        # a temporary: the numbers it parses for the fit are freed before the transform
        fitting = train.head(len(train) - label_only.get("train", 0)).select(columns)
        fitted = TabularPreprocessor.fit(fitting, source.max_onehot, categorical=source.categorical)
        fitted = fitted.model_copy(update={"label_column": label_column, "task": source.task})
        warnings = fit_warnings(source, fitting, fitted, splits)
        del fitting
    features = _transform(fitted, splits, label_only)
    # after the transform has freed the feature columns: the labels then add to less
    labels = _labels(splits, label_column, fitted.classes or None, source)
    if labels:
        fitted = fitted.model_copy(update={"classes": labels["train"].classes})
    party_splits = {}
    for name, table in splits.items():
        _release_arrow_blocks()  # the label parse's, or the last split's ID text
        party_splits[name] = PartySplit(
            ids=id_array(table.column(source.id_column)),
            features=features[name],
            labels=labels[name].values if labels else None,
        )
    _release_arrow_blocks()
    meta = _meta(source, fitted, has_labels=bool(labels))
    preprocessing = fitted.model_dump(mode="json")
    data = PartyData(meta=meta, splits=party_splits, preprocessing=preprocessing, warnings=warnings)
    return data, fitted


def split_row_ids(source: TableSource) -> dict[str, list[str]]:
    """Each split's IDs in the row order a party serving this table holds them (what the
    coordinator's row numbers of the party point at), without fitting its preprocessing."""
    splits = _read_splits(source, source.label_column, None)
    if source.label_column is not None:  # label-only rows last, as load_table_party puts them
        splits, _ = _label_only_last(splits, feature_columns(source, splits["train"]))
    return {name: id_array(t.column(source.id_column)).tolist() for name, t in splits.items()}


def _transform(
    fitted: TabularPreprocessor, splits: dict[str, Table], label_only: dict[str, int]
) -> dict[str, np.ndarray]:
    """Each split's feature rows (its label-only rows left out), every split a column at a
    time: each column is freed once it is written, so the table and its transform are never
    held whole together (about a third less memory for a large table)."""
    heads = [table.head(len(table) - label_only.get(name, 0)) for name, table in splits.items()]

    def done(name: str) -> None:
        for table in [*splits.values(), *heads]:
            table.forget(name)
        _release_arrow_blocks()

    return dict(zip(splits, fitted.transform_all(heads, done), strict=True))


def _release_arrow_blocks() -> None:
    """Hand the blocks Arrow's pool holds free back to the system. The pool keeps them for
    Arrow's later use, but what a party builds from its table (the rows, IDs and labels) is
    numpy's: without this, the peak at the end of a load is the rows plus what Arrow freed."""
    pa.default_memory_pool().release_unused()


def _read_splits(
    source: TableSource, label_column: str | None, fitted: TabularPreprocessor | None
) -> dict[str, Table]:
    holds = _holds_numbers(source, label_column, fitted)
    if source.test_path is not None:
        table = _checked_table(source.path, source.id_column, label_column, holds)
        # a column of numbers in every training row is fitted as numbers
        held = set(table.held_as_numbers)
        test_holds = holds if fitted is not None else held.__contains__
        test = _checked_table(source.test_path, source.id_column, label_column, test_holds)
        _check_disjoint(table, test, source.id_column)
        return {"train": table, "test": test}
    # split by ID hash, the IDs hashed while the file is read; the hashes find duplicated IDs
    with SplitKeysWhileReading(source.id_column) as hashing:
        table = _checked_table(
            source.path, source.id_column, label_column, holds, unique=False, watch=hashing
        )
        keys = hashing.keys(table.column(source.id_column))
    check_unique(table, source.id_column, keys)
    test = in_test(keys, source.test_fraction)
    if not test.any():
        return {"train": table}
    splits = {"train": table.rows(np.flatnonzero(~test))}
    splits["test"] = table.rows(np.flatnonzero(test))
    if not len(splits["train"]):
        raise DataError(f"{source.path}: no training rows left after the test split")
    return splits


def _holds_numbers(
    source: TableSource, label_column: str | None, fitted: TabularPreprocessor | None
) -> Callable[[str], bool]:
    """The columns read_table may hold as numbers where all their cells are: without a fit
    every feature (numbers in every row are numbers in the training rows, so fitted as numbers);
    with one, those it reads as numbers (categories are matched as text). Never the ID or the
    label: their text is what they are."""
    reserved = {source.id_column, label_column}
    if fitted is not None:
        names = {c.name for c in fitted.columns if c.kind == "numeric" and not c.dates}
    else:
        reserved |= {*source.categorical, *source.ignore_columns}  # categorical: text as written
        if source.features is None:
            return lambda name: name not in reserved
        names = set(source.features)
    return lambda name: name in names and name not in reserved


def _label_only_last(
    splits: dict[str, Table], columns: list[str]
) -> tuple[dict[str, Table], dict[str, int]]:
    """Each split with its label-only rows (every feature cell empty: the party holds the
    sample's label, not its features) moved after the others, and how many there are."""
    out: dict[str, Table] = {}
    counts: dict[str, int] = {}
    for name, table in splits.items():
        # a column with no empty cell in the file has none here: no row is label-only (most
        # tables), and no missing mask of a column without gaps is made
        if any(table.data.column(c).null_count == 0 for c in columns):
            out[name], counts[name] = table, 0
            continue
        empty = np.logical_and.reduce([table.missing(c) for c in columns])
        counts[name] = int(empty.sum())
        if not counts[name]:
            out[name] = table
            continue
        out[name] = table.rows(np.concatenate([np.flatnonzero(~empty), np.flatnonzero(empty)]))
        log.info("%s: %d label-only rows (no feature cell) in %s", table.source, counts[name], name)
    if counts["train"] == len(out["train"]):
        raise DataError(f"{out['train'].source}: no training row has any feature")
    return out, counts


def _checked_table(
    path: Path,
    id_column: str,
    label_column: str | None,
    holds: Callable[[str], bool],
    unique: bool = True,
    watch: ColumnWatch | None = None,
) -> Table:
    table = read_table(path, holds, watch)
    for column, what in ((id_column, "ID"), (label_column, "label")):
        if column is not None and column not in table.names:
            raise DataError(
                f"{path}: no {what} column {column!r} (columns: {', '.join(table.names)})"
            )
    return normalised_ids(table, id_column, unique)


def _check_disjoint(train: Table, test: Table, id_column: str) -> None:
    seen = set(train.cells(id_column))
    for row, cell in enumerate(test.cells(id_column)):
        if cell in seen:
            raise DataError(
                f"{test.source}: {test.row_name(row)}: ID {cell!r} is also a training row "
                f"in {train.source}"
            )


def _labels(
    splits: dict[str, Table],
    column: str | None,
    classes: tuple[str, ...] | None,
    source: TableSource,
) -> dict[str, Labels]:
    if column is None:
        return {}
    task = source.task
    try:
        train = parse_labels(splits["train"], column, classes, task, source.positive_class)
    except SingleClassError as error:
        raise DataError(f"{error}{_only_in_test(splits, column, source)}") from None
    out = {"train": train}
    for name, table in splits.items():
        if name != "train":
            out[name] = parse_labels(table, column, train.classes, task)
    return out


def _only_in_test(splits: dict[str, Table], column: str, source: TableSource) -> str:
    """What to add where the training rows' labels are one class but the test rows hold others
    (a rare class whose few rows all fell in the test split, stop-40 QA)."""
    if "test" not in splits or source.test_path is not None:
        return ""
    cells = splits["test"].column(column).drop_null()
    if not len(cells):
        return ""
    values, counts = (x.to_pylist() for x in pc.value_counts(cells).flatten())
    if set(values) <= set(splits["train"].column(column).unique().to_pylist()):
        return ""  # the whole file is one class
    shown = ", ".join(f"{v!r} in {c}" for v, c in zip(values, counts, strict=True))
    return (
        f"; the test split (a row is a test row when a hash of its ID falls below "
        f"--test-fraction {source.test_fraction:g}) holds {shown} of its rows: every class needs "
        "training rows, so give more rows of the others, or the test rows in a file of their "
        "own (--test-data)"
    )


def _meta(source: TableSource, fitted: TabularPreprocessor, has_labels: bool) -> PartyMeta:
    if source.task == REGRESSION:
        if source.num_classes is not None:
            raise ConfigError(
                f"--num-classes {source.num_classes} is for classification; a regression "
                f"party ({source.path}) has one real-valued output"
            )
        return _party_meta(source, fitted, has_labels, num_classes=1)
    num_classes = source.num_classes
    if has_labels:
        found = len(fitted.classes)
        if num_classes is not None and num_classes != found:
            raise ConfigError(
                f"--num-classes {num_classes}, but {source.path} has {found} label classes"
            )
        num_classes = found
    return _party_meta(source, fitted, has_labels, num_classes or 2)


def _party_meta(
    source: TableSource, fitted: TabularPreprocessor, has_labels: bool, num_classes: int
) -> PartyMeta:
    return PartyMeta(
        dataset=source.dataset,
        block=source.block,
        num_blocks=source.num_blocks,
        kind="tabular",
        feature_shape=(fitted.width,),
        num_classes=num_classes,
        has_labels=has_labels,
        categorical=fitted.cardinalities,
        task=source.task,
    )


# ---------------------------------------------------------------- keeping the fit


def load_table_party_kept(source: TableSource, keep: Path | None) -> PartyData:
    """`load_table_party`, reusing the preprocessing saved in the file `keep` if there is one
    (a restarted party must never refit: its weights were trained on that transform), else
    fitting it and saving it there."""
    fitted = None
    if keep is not None and keep.is_file():
        fitted = read_fitted(keep, source.task)
        log.info("reusing the fitted preprocessing in %s", keep)
    data, fitted_now = load_table_party(source, fitted)
    if keep is not None and fitted is None:
        write_text_atomically(keep, fitted_now.to_json())
        log.info("fitted preprocessing saved to %s", keep)
    return data


def read_fitted(path: Path, task: Task) -> TabularPreprocessor:
    """A saved preprocess.json, refused if it was fitted for another task (its label parse and
    its party's weights belong to that task)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise DataError(f"{path}: unreadable ({exc.strerror})") from None
    fitted = TabularPreprocessor.from_json(text, str(path))
    if fitted.task != task:
        raise ConfigError(
            f"{path}: the preprocessing was fitted for a {fitted.task} task, not {task} "
            f"(give the same --task as when it was fitted)"
        )
    return fitted


# ---------------------------------------------------------------- a federation in one process


def federation_sources(
    paths: list[Path],
    test_paths: list[Path] | None,
    *,
    id_column: str,
    label_column: str | None,
    label_blocks: tuple[int, ...] | None,
    test_fraction: float = DEFAULT_TEST_FRACTION,
    max_onehot: int = DEFAULT_MAX_ONEHOT,
    task: Task = CLASSIFICATION,
    features: dict[int, tuple[str, ...]] | None = None,
    positive_class: str | None = None,
    ignore_columns: dict[int, tuple[str, ...]] | None = None,
    categorical: dict[int, tuple[str, ...]] | None = None,
) -> tuple[TableSource, ...]:
    """One TableSource per file, block k for the k-th. Label parties: `label_blocks`, or (None)
    the files that have `label_column`. `features`: block -> its feature columns (a block not
    in it: every column but the ID and label); `ignore_columns`, `categorical`: block -> its
    TableSource's."""
    if not paths:
        raise ConfigError("no table files given")
    if test_paths and len(test_paths) != len(paths):
        raise ConfigError(f"{len(test_paths)} test files for {len(paths)} table files")
    if label_column is None:
        raise ConfigError("a federation of tables needs --label-column")
    if label_blocks is None:
        label_blocks = tuple(
            k for k, path in enumerate(paths) if label_column in column_names(path)
        )
    for block in label_blocks:
        if not 0 <= block < len(paths):
            raise ConfigError(f"label block {block} out of range (0..{len(paths) - 1})")
    return tuple(
        TableSource(
            path=path,
            id_column=id_column,
            label_column=label_column if k in label_blocks else None,
            test_path=test_paths[k] if test_paths else None,
            test_fraction=test_fraction,
            block=k,
            num_blocks=len(paths),
            task=task,
            max_onehot=max_onehot,
            features=(features or {}).get(k),
            positive_class=positive_class if k in label_blocks else None,
            ignore_columns=(ignore_columns or {}).get(k, ()),
            categorical=(categorical or {}).get(k, ()),
        )
        for k, path in enumerate(paths)
    )


def load_table_federation(sources: tuple[TableSource, ...]) -> list[PartyData]:
    """Every party of a simulated federation of tables, each fitted on its own rows only. In
    classification the feature-only parties take the label parties' class count (in a real
    federation they are told it with --num-classes); regression has none to tell."""
    labelled = [load_table_party(s)[0] for s in sources if s.label_column is not None]
    if not labelled:
        raise ConfigError("no table has the label column: at least one party needs labels")
    _check_label_parties_agree([s for s in sources if s.label_column is not None], labelled)
    meta = labelled[0].meta
    told = {"num_classes": meta.num_classes} if meta.task == CLASSIFICATION else {}
    unlabelled = [
        load_table_party(s.model_copy(update=told))[0] for s in sources if s.label_column is None
    ]
    parties = sorted(labelled + unlabelled, key=lambda d: d.meta.block)
    _refuse_if_ids_differ(sources, parties)
    return parties


def _check_label_parties_agree(sources: list[TableSource], labelled: list[PartyData]) -> None:
    """Without --label-blocks every table with the label column is a label party: a feature
    party's own column of that name (a shop's product 'label') made it one, and the run ended in
    "parties disagree on num_classes" (stop-40 QA). Label parties whose classes differ are
    named, with their classes and the option that leaves the others' column a feature."""
    found = [tuple((d.preprocessing or {}).get("classes") or ()) for d in labelled]
    if len(set(found)) < 2:
        return
    listed = "; ".join(
        f"{s.path} has {', '.join(map(repr, c[:5]))}{', ...' if len(c) > 5 else ''}"
        for s, c in zip(sources, found, strict=True)
    )
    first = sources[0]
    raise DataError(
        f"the tables with the label column {first.label_column!r} disagree on its classes: "
        f"{listed}. Every table with that column is a label party unless --label-blocks names "
        f"them: where another table's {first.label_column!r} is a column of its own, give "
        f"--label-blocks with the label parties' blocks only (e.g. --label-blocks {first.block})"
    )


def _refuse_if_ids_differ(sources: tuple[TableSource, ...], parties: list[PartyData]) -> None:
    """Two tables that share few of their IDs as written but many once IDs are normalised
    (case, separators, leading zeros): the parties write their IDs differently, and only IDs
    written alike align. Refused before training with examples from both tables, not
    normalised: which form is right is the parties' to decide (over gRPC no one sees both)."""
    ids = [{str(i) for split in d.splits.values() for i in split.ids} for d in parties]
    normal = [{_normalised(i): i for i in sorted(some)} for some in ids]
    for a, b in itertools.combinations(range(len(parties)), 2):
        shared = len(ids[a] & ids[b])
        alike = sorted(normal[a].keys() & normal[b].keys())
        if len(alike) > 2 * shared + 10:
            pairs = [(normal[a][n], normal[b][n]) for n in alike if normal[a][n] != normal[b][n]]
            examples = ", ".join(f"{x!r} and {y!r}" for x, y in pairs[:3])
            raise DataError(
                f"{sources[a].path} and {sources[b].path} share {shared} sample IDs as written, "
                f"but {len(alike)} once case, separators and leading zeros are ignored "
                f"({examples}): write the IDs alike at every party (only IDs written alike "
                "align); refused before training"
            )


def _normalised(sample_id: str) -> str:
    """An ID without case, separators or leading zeros of its numbers ("C-007" -> "c7")."""
    text = re.sub(r"[\W_]", "", sample_id.casefold())
    return re.sub(r"(?<![0-9])0+(?=[0-9])", "", text)
