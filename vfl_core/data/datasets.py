"""Whole (unsplit) data sets, before `vfl prepare` cuts them into parties' feature blocks.

Sources: scikit-learn's digits (embedded, the default) and diabetes (embedded, regression), MNIST
IDX files and the UCI credit-card CSV. Every sample gets a stable string ID so parties can align
rows without sharing features.
"""

from __future__ import annotations

import csv
import gzip
import logging
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from vfl_core.errors import ConfigError, DataError

log = logging.getLogger(__name__)

DATASET_NAMES = ("digits", "mnist", "credit", "diabetes")
DEFAULT_DATA_DIR = Path("../shared/data")  # relative to the project root (cwd)
MNIST_FILES = ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
CREDIT_FILE = "UCI_Credit_Card.csv"
CREDIT_LABEL_COLUMNS = ("default", "default.payment.next.month", "default payment next month")

Kind = Literal["image", "tabular"]
Layout = Literal["auto", "quadrants", "strips", "columns"]


@dataclass(frozen=True)
class Dataset:
    name: str
    kind: Kind
    x: np.ndarray  # float32, (N, C, H, W) for images, (N, F) for tabular
    y: np.ndarray  # (N,) int64 classes, or float32 targets for regression
    ids: np.ndarray  # str, (N,), unique
    num_classes: int  # 1 for regression (one real-valued output)
    task: Literal["classification", "regression"] = "classification"

    def __post_init__(self) -> None:
        if not len(self.x) == len(self.y) == len(self.ids):
            raise DataError(
                f"{self.name}: {len(self.x)} samples, {len(self.y)} labels and "
                f"{len(self.ids)} IDs do not match"
            )

    def __len__(self) -> int:
        return len(self.ids)


# ---------------------------------------------------------------- digits


def load_digits_dataset() -> Dataset:
    """scikit-learn's 8x8 digits (1797 images), pixels scaled from 0..16 to [0, 1]."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None]  # (N, 8, 8) -> (N, 1, 8, 8)
    return Dataset(
        name="digits",
        kind="image",
        x=x,
        y=digits.target.astype(np.int64),
        ids=_make_ids("digits", len(x)),
        num_classes=10,
    )


# ---------------------------------------------------------------- diabetes (regression)


def load_diabetes_dataset() -> Dataset:
    """scikit-learn's diabetes regression set: 442 patients, 10 baseline features, the target a
    measure of disease progression one year later (25..346). Features are the raw (unscaled)
    values; `vfl prepare` standardises tabular data with training statistics."""
    from sklearn.datasets import load_diabetes

    diabetes = load_diabetes(scaled=False)
    return Dataset(
        name="diabetes",
        kind="tabular",
        x=diabetes.data.astype(np.float32),  # (442, 10)
        y=diabetes.target.astype(np.float32),  # (442,)
        ids=_make_ids("diabetes", len(diabetes.target)),
        num_classes=1,
        task="regression",
    )


def _make_ids(prefix: str, n: int) -> np.ndarray:
    return np.array([f"{prefix}-{i}" for i in range(n)], dtype=str)


# ---------------------------------------------------------------- MNIST (IDX)

_IDX_IMAGES_MAGIC = 2051  # 0x00000803: unsigned bytes, 3 dimensions
_IDX_LABELS_MAGIC = 2049  # 0x00000801: unsigned bytes, 1 dimension


def load_mnist_idx(images_path: Path, labels_path: Path) -> Dataset:
    """MNIST from a pair of IDX files (gzip-compressed or plain), pixels scaled to [0, 1]."""
    images = _read_idx(Path(images_path), _IDX_IMAGES_MAGIC, dims=3)  # (N, H, W) uint8
    labels = _read_idx(Path(labels_path), _IDX_LABELS_MAGIC, dims=1)  # (N,) uint8
    if len(images) != len(labels):
        raise DataError(
            f"{images_path}: {len(images)} images but {labels_path} has {len(labels)} labels"
        )
    if len(labels) and labels.max() > 9:
        raise DataError(f"{labels_path}: label {int(labels.max())} outside 0..9")
    return Dataset(
        name="mnist",
        kind="image",
        x=(images.astype(np.float32) / 255.0)[:, None],  # (N, H, W) -> (N, 1, H, W)
        y=labels.astype(np.int64),
        ids=_make_ids("mnist", len(labels)),
        num_classes=10,
    )


def _read_idx(path: Path, magic: int, dims: int) -> np.ndarray:
    raw = _read_maybe_gzip(path)
    header_size = 4 + 4 * dims  # magic, then one big-endian uint32 size per dimension
    if len(raw) >= 4 and (found := struct.unpack(">I", raw[:4])[0]) != magic:
        raise DataError(f"{path}: IDX magic number {found}, expected {magic}")
    if len(raw) < header_size:
        raise DataError(f"{path}: truncated IDX header ({len(raw)} bytes)")
    shape = struct.unpack(f">{dims}I", raw[4:header_size])
    expected = int(np.prod(shape))
    body = raw[header_size:]
    if len(body) != expected:
        raise DataError(
            f"{path}: IDX body has {len(body)} bytes, header {shape} needs {expected} "
            f"(truncated or corrupt file)"
        )
    return np.frombuffer(body, dtype=np.uint8).reshape(shape)


def _read_maybe_gzip(path: Path) -> bytes:
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":  # gzip magic, whatever the file is called
            raw = gzip.decompress(raw)
    except (OSError, EOFError) as exc:  # BadGzipFile is an OSError; truncated gzip is EOFError
        raise DataError(f"{path}: unreadable or corrupt ({exc})") from exc
    return raw


# ---------------------------------------------------------------- credit (CSV)


def load_credit_csv(path: Path, columns: int | None = 20) -> Dataset:
    """The UCI credit-card default data set, raw (unstandardised) values.

    The sample ID is always the 0-based data-row number ("credit-<row>"), whether or not the
    file has an ``ID`` column, so both published variants of the file give the same IDs. An ID
    column is never a feature. ``columns`` keeps the first that many feature columns (the
    paper uses the first 20 of 23); None keeps all.
    """
    path = Path(path)
    header, rows = _read_csv(path)
    label_col = _find_label_column(path, header)
    feature_cols = [i for i, name in enumerate(header) if i != label_col and not _is_id(name)]
    feature_cols = feature_cols[: _check_columns(path, columns, len(feature_cols))]
    values = _parse_numbers(path, header, rows)  # (N, all columns) float64
    labels = _check_binary_labels(path, header[label_col], values[:, label_col])
    return Dataset(
        name="credit",
        kind="tabular",
        x=values[:, feature_cols].astype(np.float32),
        y=labels,
        ids=_make_ids("credit", len(rows)),
        num_classes=2,
    )


def _read_csv(path: Path) -> tuple[list[str], list[list[str]]]:
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    try:
        with path.open(newline="", encoding="utf-8-sig") as f:
            table = list(csv.reader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise DataError(f"{path}: unreadable CSV ({exc})") from exc
    table = [row for row in table if row]  # tolerate blank lines (e.g. a trailing one)
    if len(table) < 2:
        raise DataError(f"{path}: no data rows (need a header line and at least one row)")
    header = [name.strip() for name in table[0]]
    for row_number, row in enumerate(table[1:]):
        if len(row) != len(header):
            raise DataError(
                f"{path}: data row {row_number} has {len(row)} fields, the header has {len(header)}"
            )
    return header, table[1:]


def _is_id(name: str) -> bool:
    return name.lower() == "id"


def _find_label_column(path: Path, header: list[str]) -> int:
    lowered = [name.lower() for name in header]
    for candidate in CREDIT_LABEL_COLUMNS:
        if candidate in lowered:
            return lowered.index(candidate)
    raise DataError(f"{path}: no label column 'default' in the header")


def _check_columns(path: Path, columns: int | None, available: int) -> int:
    if columns is None:
        return available
    if not 1 <= columns <= available:
        raise ConfigError(f"columns must be between 1 and {available} for {path}, got {columns}")
    return columns


def _parse_numbers(path: Path, header: list[str], rows: list[list[str]]) -> np.ndarray:
    try:
        values = np.array(rows, dtype=np.float64)  # fast path; the slow one names the cell
    except ValueError:
        values = None
    if values is None or not np.isfinite(values).all():
        _raise_first_bad_cell(path, header, rows)
    assert values is not None
    return values


def _raise_first_bad_cell(path: Path, header: list[str], rows: list[list[str]]) -> None:
    for row_number, row in enumerate(rows):
        for name, cell in zip(header, row, strict=True):
            try:
                ok = np.isfinite(float(cell))
            except ValueError:
                ok = False
            if not ok:
                raise DataError(
                    f"{path}: data row {row_number}, column {name!r}: {cell!r} is not a "
                    f"finite number"
                )
    raise DataError(f"{path}: non-numeric data")  # unreachable in practice


def _check_binary_labels(path: Path, name: str, column: np.ndarray) -> np.ndarray:
    bad = (column != 0) & (column != 1)
    if bad.any():
        row_number = int(np.flatnonzero(bad)[0])
        raise DataError(
            f"{path}: data row {row_number}, column {name!r}: label {column[row_number]:g} "
            f"is not 0 or 1"
        )
    return column.astype(np.int64)


# ---------------------------------------------------------------- dispatch


def load_dataset(name: str, path: Path | None = None, *, columns: int | None = 20) -> Dataset:
    """Load a data set by name. ``path`` is where its source files are (unused for digits).

    mnist: a directory holding the two t10k IDX files; credit: the CSV or a directory
    holding it. Without ``path`` both look in ../shared/data (relative to the working
    directory); digits and diabetes ship with scikit-learn. ``columns`` only applies to credit.
    """
    if name == "digits":
        if path is not None:
            log.warning("digits is embedded in scikit-learn; ignoring data path %s", path)
        return load_digits_dataset()
    if name == "diabetes":
        if path is not None:
            log.warning("diabetes is embedded in scikit-learn; ignoring data path %s", path)
        return load_diabetes_dataset()
    if name == "mnist":
        images, labels = (_find_source(path, file_name, name) for file_name in MNIST_FILES)
        return load_mnist_idx(images, labels)
    if name == "credit":
        return load_credit_csv(_find_source(path, CREDIT_FILE, name), columns=columns)
    raise DataError(f"unknown data set {name!r} (known: {', '.join(DATASET_NAMES)})")


def _find_source(path: Path | None, file_name: str, dataset: str) -> Path:
    """Resolve a source file: ``path`` itself if it is a file, else ``file_name`` in a dir."""
    base = Path(path) if path is not None else DEFAULT_DATA_DIR
    if base.is_file():
        return base
    candidates = [base / file_name]
    if not file_name.endswith(".csv"):  # IDX files come gzip-compressed or plain
        candidates.insert(0, base / f"{file_name}.gz")
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    hint = "" if path is not None else " (pass --data-path)"
    raise DataError(
        f"{dataset}: expected {' or '.join(c.name for c in candidates)} in {base}{hint}"
    )


# ---------------------------------------------------------------- feature blocks


def split_blocks(
    x: np.ndarray, kind: str, num_blocks: int, layout: Layout = "auto"
) -> list[np.ndarray]:
    """Cut every sample into ``num_blocks`` feature blocks, one per party (block k -> party k).

    Images: "quadrants" (K=4: top-left, top-right, bottom-left, bottom-right) or "strips"
    (K vertical strips of columns); "auto" picks quadrants for K=4, strips otherwise.
    Tabular: K contiguous column blocks. Uneven cuts follow np.array_split (first blocks
    one wider).
    """
    if num_blocks < 1:
        raise ConfigError(f"number of blocks must be at least 1, got {num_blocks}")
    if kind == "image":
        blocks = _split_image(x, num_blocks, layout)
    elif kind == "tabular":
        blocks = _split_tabular(x, num_blocks, layout)
    else:
        raise DataError(f"unknown data kind {kind!r} (expected image or tabular)")
    return [np.ascontiguousarray(block) for block in blocks]


def _split_image(x: np.ndarray, num_blocks: int, layout: str) -> list[np.ndarray]:
    if x.ndim != 4:
        raise DataError(f"image data must be (N, C, H, W), got shape {list(x.shape)}")
    if layout == "auto":
        layout = "quadrants" if num_blocks == 4 else "strips"
    if layout == "quadrants":
        if num_blocks != 4:
            raise ConfigError(f"layout 'quadrants' needs exactly 4 blocks, got {num_blocks}")
        if min(x.shape[2:]) < 2:
            raise ConfigError(f"images of size {list(x.shape[2:])} are too small for quadrants")
        top, bottom = np.array_split(x, 2, axis=2)  # rows
        return [*np.array_split(top, 2, axis=3), *np.array_split(bottom, 2, axis=3)]
    if layout == "strips":
        width = x.shape[3]
        if num_blocks > width:
            raise ConfigError(f"cannot cut {width}-pixel-wide images into {num_blocks} strips")
        return np.array_split(x, num_blocks, axis=3)  # (N, C, H, ~W/K) each
    raise ConfigError(f"layout {layout!r} is not for images (use auto, quadrants or strips)")


def _split_tabular(x: np.ndarray, num_blocks: int, layout: str) -> list[np.ndarray]:
    if x.ndim != 2:
        raise DataError(f"tabular data must be (N, F), got shape {list(x.shape)}")
    if layout not in ("auto", "columns"):
        raise ConfigError(f"layout {layout!r} is not for tabular data (use auto or columns)")
    if num_blocks > x.shape[1]:
        raise ConfigError(f"cannot cut {x.shape[1]} columns into {num_blocks} blocks")
    return np.array_split(x, num_blocks, axis=1)  # (N, ~F/K) each
