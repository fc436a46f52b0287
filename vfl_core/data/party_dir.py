"""One party's data on disk: its block's features, sample IDs, labels if it holds them, metadata.

Layout of a party directory (written by `vfl prepare`, read by `vfl-client --data DIR`):

    meta.json              PartyMeta as JSON
    train/features.npy     float32, (n, *feature_shape)
    train/ids.npy          unicode strings, (n,), unique within the split
    train/labels.npy       (n,) int64 classes, or float32 targets when meta.task is regression
                           (only when meta.has_labels); -1 marks an unlabelled sample
                           if meta.unlabelled_rows
    train/label_only_ids.npy, train/label_only_labels.npy
                           optional, label parties only: samples whose label the party holds
                           but not their features (label-only rows: they are scored and trained
                           on by the party's head from the other parties' embeddings)
    test/...               the same for the test split (optional)
    preprocess.json        a tabular party's fitted preprocessing (vfl_core.data.preprocess), if any

meta.json written before tasks existed has no "task" and loads as classification.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from vfl_core.data.missingness import UNLABELLED
from vfl_core.errors import DataError
from vfl_core.protocol import disagreement

FORMAT_VERSION = 1


class PartyMeta(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    format: int = FORMAT_VERSION
    dataset: str
    block: int = Field(ge=0)
    num_blocks: int = Field(ge=1)
    kind: Literal["image", "tabular"]
    feature_shape: tuple[int, ...]  # per sample: (C, H, W) for images, (F,) for tabular
    # Regression: num_classes is 1, the head's one output (the target in original units).
    num_classes: int = Field(ge=1)
    has_labels: bool
    # Tabular: cardinalities of the categorical code columns that end each feature vector (the
    # representation model embeds them). Stays with the party: not part of its PartyInfo.
    categorical: tuple[int, ...] = ()
    task: Literal["classification", "regression"] = "classification"
    # The training labels may mark unknown labels as UNLABELLED (-1): vfl prepare --labels N.
    unlabelled_rows: bool = False


@dataclass(frozen=True)
class PartySplit:
    """A split's rows: those with features first, then the label-only rows (a label party
    holds their labels but not their features), which have IDs and labels but no features."""

    ids: np.ndarray  # (n,) str
    features: np.ndarray  # (n - label_only, *feature_shape) float32
    labels: np.ndarray | None  # (n,) int64 classes, or float32 targets (regression)

    def __post_init__(self) -> None:
        if not 0 <= self.label_only <= len(self.ids) or (self.label_only and self.labels is None):
            raise DataError(
                f"split of {len(self.ids)} IDs with {len(self.features)} feature rows: only a "
                f"label party may hold label-only rows, after its rows with features"
            )

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def label_only(self) -> int:
        """How many rows, at the end, hold a label but no features."""
        return len(self.ids) - len(self.features)


@dataclass(frozen=True)
class PartyData:
    meta: PartyMeta
    splits: dict[str, PartySplit]  # "train" and/or "test"
    # A tabular party's fitted preprocessing as JSON-ready data (vfl_core.data.preprocess); it goes
    # into the party's checkpoints with its weights.
    preprocessing: dict | None = None
    # What reading a table found worth telling its party (vfl_core.data.code_columns): shown by
    # vfl prepare and vfl simulate as "warning: " lines, logged by vfl-client. Not saved.
    warnings: tuple[str, ...] = ()


SPLIT_NAMES = ("train", "test")
_LABEL_ONLY_FILES = ("label_only_ids.npy", "label_only_labels.npy")
_ARRAY_FILES = ("features.npy", "ids.npy", "labels.npy", *_LABEL_ONLY_FILES)
PREPROCESS_FILE = "preprocess.json"
_NPY_MAGIC = b"\x93NUMPY"
_EXPECTED_FEATURE_RANK = {"image": 3, "tabular": 1}

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- writing


def save_party_dir(path: Path, data: PartyData) -> None:
    """Write a party directory (see the module docstring for the layout).

    Split directories this call does not write are cleared of our files, so re-running
    `vfl prepare` into the same place never leaves a stale split or label file behind.
    """
    unknown = sorted(set(data.splits) - set(SPLIT_NAMES))
    if unknown:
        raise DataError(f"{path}: unknown split name {unknown[0]!r} (expected train or test)")
    _check_labels_match_meta(path, data)
    path.mkdir(parents=True, exist_ok=True)
    (path / "meta.json").write_text(data.meta.model_dump_json(indent=2) + "\n")
    if data.preprocessing is not None:
        (path / PREPROCESS_FILE).write_text(json.dumps(data.preprocessing, indent=2) + "\n")
    else:
        (path / PREPROCESS_FILE).unlink(missing_ok=True)
    for name in SPLIT_NAMES:
        if name in data.splits:
            _save_split(path / name, data.splits[name], data.meta.task)
        else:
            _clear_split(path / name)


def _check_labels_match_meta(path: Path, data: PartyData) -> None:
    for name, split in data.splits.items():
        if data.meta.has_labels and split.labels is None:
            raise DataError(f"{path}: meta says has_labels but split {name!r} has no labels")
        if not data.meta.has_labels and split.labels is not None:
            raise DataError(f"{path}: meta says has_labels=false but split {name!r} has labels")


def _save_split(split_dir: Path, split: PartySplit, task: str) -> None:
    split_dir.mkdir(parents=True, exist_ok=True)
    n = len(split.features)
    np.save(split_dir / "features.npy", np.ascontiguousarray(split.features, dtype=np.float32))
    # A fixed-width unicode array loads with allow_pickle=False (an object array would not).
    ids = np.asarray(split.ids).astype(str)
    np.save(split_dir / "ids.npy", ids[:n])
    labels_file = split_dir / "labels.npy"
    if split.labels is not None:
        dtype = np.float32 if task == "regression" else np.int64
        labels = np.asarray(split.labels, dtype=dtype)
        np.save(labels_file, labels[:n])
    else:
        labels_file.unlink(missing_ok=True)
    if split.label_only and split.labels is not None:
        np.save(split_dir / _LABEL_ONLY_FILES[0], ids[n:])
        np.save(split_dir / _LABEL_ONLY_FILES[1], labels[n:])
    else:
        for name in _LABEL_ONLY_FILES:
            (split_dir / name).unlink(missing_ok=True)


def _clear_split(split_dir: Path) -> None:
    if not split_dir.is_dir():
        return
    for file_name in _ARRAY_FILES:
        (split_dir / file_name).unlink(missing_ok=True)
    if not any(split_dir.iterdir()):
        split_dir.rmdir()


# ---------------------------------------------------------------- reading


def load_party_dir(path: Path) -> PartyData:
    """Read and validate a party directory; any problem is a one-line DataError naming it."""
    path = Path(path)
    if not path.is_dir():
        raise DataError(f"{path}: party directory does not exist")
    meta = _load_meta(path)
    splits = {
        name: _load_split(path / name, meta) for name in SPLIT_NAMES if (path / name).is_dir()
    }
    if not splits:
        raise DataError(f"{path}: no split directory (expected train/ and/or test/)")
    return PartyData(meta=meta, splits=splits, preprocessing=_load_preprocessing(path))


def _load_preprocessing(path: Path) -> dict | None:
    file = path / PREPROCESS_FILE
    if not file.is_file():
        return None
    try:
        raw = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{file}: unreadable ({exc})") from exc
    if not isinstance(raw, dict):
        raise DataError(f"{file}: expected a JSON object")
    return raw


def _load_meta(path: Path) -> PartyMeta:
    meta_file = path / "meta.json"
    if not meta_file.is_file():
        raise DataError(f"{meta_file}: missing (every party directory needs meta.json)")
    try:
        raw = json.loads(meta_file.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{meta_file}: unreadable ({exc})") from exc
    except json.JSONDecodeError as exc:
        raise DataError(f"{meta_file}: malformed JSON ({exc})") from exc
    # Check the version first: a future format may fail validation for reasons a reader of
    # this version cannot explain, and "unknown format" is the useful message then.
    if isinstance(raw, dict) and raw.get("format", FORMAT_VERSION) != FORMAT_VERSION:
        raise DataError(
            f"{meta_file}: unknown format version {raw['format']!r} "
            f"(this version reads format {FORMAT_VERSION})"
        )
    try:
        meta = PartyMeta.model_validate(raw)
    except ValidationError as exc:
        raise DataError(f"{meta_file}: invalid metadata: {_summarise(exc)}") from exc
    _check_meta(meta_file, meta)
    return meta


def _summarise(exc: ValidationError) -> str:
    """One line out of pydantic's multi-line report: the first problem and how many others."""
    errors = exc.errors()
    first = errors[0]
    where = ".".join(str(part) for part in first["loc"]) or "(top level)"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {first['msg']}{more}"


def _check_meta(meta_file: Path, meta: PartyMeta) -> None:
    if meta.block >= meta.num_blocks:
        raise DataError(
            f"{meta_file}: block {meta.block} out of range (num_blocks is {meta.num_blocks})"
        )
    rank = _EXPECTED_FEATURE_RANK[meta.kind]
    if len(meta.feature_shape) != rank or min(meta.feature_shape) < 1:
        raise DataError(
            f"{meta_file}: feature_shape {list(meta.feature_shape)} is not valid for "
            f"{meta.kind} data (expected {rank} positive sizes)"
        )
    if meta.categorical and (
        meta.kind != "tabular"
        or len(meta.categorical) > meta.feature_shape[0]
        or min(meta.categorical) < 1
    ):
        raise DataError(
            f"{meta_file}: categorical {list(meta.categorical)} does not fit "
            f"{meta.kind} features of shape {list(meta.feature_shape)}"
        )
    if meta.task == "classification" and meta.num_classes < 2:
        raise DataError(
            f"{meta_file}: num_classes {meta.num_classes} is not valid for classification "
            f"(at least 2)"
        )
    if meta.task == "regression" and meta.num_classes != 1:
        raise DataError(
            f"{meta_file}: num_classes must be 1 for a regression task (one real-valued "
            f"output), got {meta.num_classes}"
        )


def _load_split(split_dir: Path, meta: PartyMeta) -> PartySplit:
    features = _check_features(split_dir, _load_npy(split_dir / "features.npy"), meta)
    ids = _check_ids(split_dir / "ids.npy", _load_npy(split_dir / "ids.npy"), len(features))
    labels = None
    if meta.has_labels:
        labels = _check_labels(split_dir / "labels.npy", len(ids), meta)
        ids, labels = _with_label_only_rows(split_dir, ids, labels, meta)
    elif any((split_dir / name).exists() for name in ("labels.npy", *_LABEL_ONLY_FILES)):
        log.warning("%s: ignoring labels (meta.json says has_labels=false)", split_dir)
    return PartySplit(ids=ids, features=features, labels=labels)


def _with_label_only_rows(
    split_dir: Path, ids: np.ndarray, labels: np.ndarray, meta: PartyMeta
) -> tuple[np.ndarray, np.ndarray]:
    """The split's IDs and labels followed by its label-only rows, if it has any."""
    id_file, label_file = (split_dir / name for name in _LABEL_ONLY_FILES)
    if not id_file.exists() and not label_file.exists():
        return ids, labels
    more_ids = _check_ids(id_file, _load_npy(id_file), None)
    more_labels = _check_labels(label_file, len(more_ids), meta)
    all_ids = _check_ids(id_file, np.concatenate([ids, more_ids]), None)
    return all_ids, np.concatenate([labels, more_labels])


def _load_npy(file: Path) -> np.ndarray:
    if not file.is_file():
        raise DataError(f"{file}: missing")
    try:
        with file.open("rb") as f:
            magic = f.read(len(_NPY_MAGIC))
        if magic != _NPY_MAGIC:  # numpy would blame "pickled data" for any foreign file
            raise DataError(f"{file}: not a .npy file (bad magic bytes)")
        array = np.load(file, allow_pickle=False)
    except (ValueError, OSError, EOFError, TypeError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise DataError(f"{file}: not a readable .npy array ({reason})") from exc
    return array


def _check_features(split_dir: Path, features: np.ndarray, meta: PartyMeta) -> np.ndarray:
    file = split_dir / "features.npy"
    if features.dtype.kind not in "fiu":
        raise DataError(f"{file}: dtype {features.dtype} is not numeric (expected float32)")
    if features.ndim < 1 or features.shape[1:] != meta.feature_shape:
        raise DataError(
            f"{file}: shape {list(features.shape)} does not match (n, "
            f"{', '.join(map(str, meta.feature_shape))}) from meta.json"
        )
    features = features.astype(np.float32, copy=False)
    if not np.isfinite(features).all():
        bad_row = int(np.argwhere(~np.isfinite(features))[0][0])
        raise DataError(f"{file}: NaN or Inf in features (first at row {bad_row})")
    if meta.categorical:
        _check_codes(file, features[:, -len(meta.categorical) :], meta.categorical)
    return features


def _check_codes(file: Path, codes: np.ndarray, cardinalities: tuple[int, ...]) -> None:
    """The categorical code columns hold integers below their cardinality (embedding rows)."""
    bad = (codes != np.round(codes)) | (codes < 0) | (codes >= np.asarray(cardinalities))
    if bad.any():
        row, column = (int(i) for i in np.argwhere(bad)[0])
        raise DataError(
            f"{file}: row {row}: categorical code {codes[row, column]:g} is not an integer in "
            f"[0, {cardinalities[column]})"
        )


def _check_ids(file: Path, ids: np.ndarray, n: int | None) -> np.ndarray:
    """Unique strings, one per feature row (n) or any number (label-only rows: n None)."""
    if ids.dtype.kind != "U":
        raise DataError(f"{file}: dtype {ids.dtype} is not a unicode string array")
    if ids.ndim != 1:
        raise DataError(f"{file}: expected a 1-D array, got shape {list(ids.shape)}")
    if n is not None and len(ids) != n:
        raise DataError(f"{file}: {len(ids)} IDs but features.npy has {n} rows")
    unique, counts = np.unique(ids, return_counts=True)
    if len(unique) != len(ids):
        raise DataError(f"{file}: duplicated sample ID {str(unique[counts > 1][0])!r}")
    return ids


def _check_labels(file: Path, n: int, meta: PartyMeta) -> np.ndarray:
    labels = _load_npy(file)
    ids_file = file.name.replace("labels", "ids")
    if labels.ndim != 1 or len(labels) != n:
        raise DataError(f"{file}: shape {list(labels.shape)} does not match ({n},) from {ids_file}")
    if meta.task == "regression":
        return _check_targets(file, labels)
    if labels.dtype.kind not in "iu":
        raise DataError(
            f"{file}: dtype {labels.dtype} is not an integer type (classes; meta.json says "
            f"task classification)"
        )
    # UNLABELLED (-1) marks a training sample whose label is not known (vfl prepare --labels);
    # evaluation needs every label.
    unlabelled_ok = meta.unlabelled_rows and file.parent.name == "train"
    bad = ((labels < 0) & ~((labels == UNLABELLED) & unlabelled_ok)) | (labels >= meta.num_classes)
    if bad.any():
        hint = f"; {UNLABELLED} marks an unlabelled training sample" if unlabelled_ok else ""
        raise DataError(
            f"{file}: label {int(labels[bad][0])} outside [0, {meta.num_classes}) "
            f"(num_classes from meta.json{hint})"
        )
    return labels.astype(np.int64, copy=False)


def _check_targets(file: Path, labels: np.ndarray) -> np.ndarray:
    """Regression targets: real numbers, finite, stored as float32."""
    if labels.dtype.kind != "f":
        raise DataError(
            f"{file}: dtype {labels.dtype} is not a float type (meta.json says task regression: "
            f"targets are float32)"
        )
    targets = labels.astype(np.float32)
    if not np.isfinite(targets).all():
        bad_row = int(np.argwhere(~np.isfinite(targets))[0][0])
        raise DataError(f"{file}: NaN, Inf or float32 overflow in targets (first at row {bad_row})")
    return targets


# ---------------------------------------------------------------- federation


def check_federation(parties: list[PartyData]) -> None:
    """Check that party directories used together (simulation) describe one federation."""
    if not parties:
        raise DataError("no party directories given")
    _check_same_setup(parties)
    _check_blocks(parties)
    if not any(p.meta.has_labels for p in parties):
        raise DataError("no party holds labels (at least one needs has_labels=true)")
    _check_labels_agree(parties)


def _check_same_setup(parties: list[PartyData]) -> None:
    found = disagreement([p.meta for p in parties])
    if found is not None:
        field, first, other = found
        raise DataError(
            f"parties disagree on {field}: block {first.block} has {getattr(first, field)!r}, "
            f"block {other.block} has {getattr(other, field)!r}"
        )


def _check_blocks(parties: list[PartyData]) -> None:
    seen: set[int] = set()
    for party in parties:
        block, num_blocks = party.meta.block, party.meta.num_blocks
        if block >= num_blocks:
            raise DataError(f"block {block} out of range (num_blocks is {num_blocks})")
        if block in seen:
            raise DataError(f"two parties hold block {block} (blocks must be distinct)")
        seen.add(block)


def _check_labels_agree(parties: list[PartyData]) -> None:
    """The same sample must carry the same label at every party that holds labels."""
    for split_name in SPLIT_NAMES:
        seen: dict[str, tuple[int, int]] = {}  # ID -> (label, block that gave it)
        for party in parties:
            split = party.splits.get(split_name)
            if split is None or split.labels is None:
                continue
            block = party.meta.block
            for sample_id, label in zip(split.ids.tolist(), split.labels.tolist(), strict=True):
                known = seen.setdefault(sample_id, (label, block))
                if known[0] != label:
                    raise DataError(
                        f"labels disagree in split {split_name!r} for ID {sample_id!r}: "
                        f"block {known[1]} says {known[0]}, block {block} says {label} (class "
                        "indices); if only some of them hold the labels, name those with "
                        "--label-blocks"
                    )


def labelled_rows_only(data: PartyData, split: str = "train") -> PartyData:
    """The party's data without the rows of ``split`` whose label is UNLABELLED: what a method
    that learns only from labels trains on. A party without labels is returned unchanged (it
    cannot know which samples are unlabelled; their rows pair with no label party's rows)."""
    part = data.splits.get(split)
    if part is None or part.labels is None or not (part.labels == UNLABELLED).any():
        return data
    keep = part.labels != UNLABELLED  # (n,): rows with features first, then label-only rows
    kept = PartySplit(part.ids[keep], part.features[keep[: len(part.features)]], part.labels[keep])
    return replace(data, splits={**data.splits, split: kept})
