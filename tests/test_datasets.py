"""Whole data sets: digits, MNIST IDX reader, credit CSV reader, dispatch and block cutting."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

from vfl_core.data.datasets import (
    load_credit_csv,
    load_dataset,
    load_digits_dataset,
    load_mnist_idx,
    split_blocks,
)
from vfl_core.errors import ConfigError, DataError

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
MNIST_IMAGES = SHARED / "t10k-images-idx3-ubyte.gz"
MNIST_LABELS = SHARED / "t10k-labels-idx1-ubyte.gz"
CREDIT_CSV = SHARED / "UCI_Credit_Card.csv"


# ---------------------------------------------------------------- digits


def test_digits_are_scaled_images_with_ids() -> None:
    data = load_digits_dataset()
    assert data.kind == "image" and data.num_classes == 10
    assert data.x.shape == (1797, 1, 8, 8) and data.x.dtype == np.float32
    assert data.x.min() == 0.0 and data.x.max() == 1.0
    assert data.y.dtype == np.int64 and set(data.y.tolist()) == set(range(10))
    assert data.ids[0] == "digits-0" and data.ids[-1] == "digits-1796"
    assert len(set(data.ids.tolist())) == len(data)


# ---------------------------------------------------------------- MNIST IDX


def write_idx(path: Path, magic: int, array: np.ndarray, compress: bool) -> Path:
    raw = struct.pack(f">{1 + array.ndim}I", magic, *array.shape) + array.astype(np.uint8).tobytes()
    path.write_bytes(gzip.compress(raw) if compress else raw)
    return path


@pytest.fixture
def tiny_idx(tmp_path: Path) -> tuple[Path, Path, np.ndarray, np.ndarray]:
    images = np.arange(3 * 4 * 5, dtype=np.uint8).reshape(3, 4, 5) * 4
    labels = np.array([7, 0, 9], dtype=np.uint8)
    return (
        write_idx(tmp_path / "images.gz", 2051, images, compress=True),
        write_idx(tmp_path / "labels", 2049, labels, compress=False),
        images,
        labels,
    )


def test_idx_reader_reads_gzip_and_plain_files(tiny_idx: tuple) -> None:
    images_path, labels_path, images, labels = tiny_idx
    data = load_mnist_idx(images_path, labels_path)
    assert data.x.shape == (3, 1, 4, 5) and data.x.dtype == np.float32
    np.testing.assert_allclose(data.x[:, 0] * 255, images, atol=1e-4)
    assert data.y.tolist() == labels.tolist() and data.y.dtype == np.int64
    assert data.ids.tolist() == ["mnist-0", "mnist-1", "mnist-2"]


def test_idx_reader_refuses_wrong_magic(tiny_idx: tuple) -> None:
    _, labels_path, *_ = tiny_idx
    with pytest.raises(DataError, match="magic number 2049, expected 2051"):
        load_mnist_idx(labels_path, labels_path)


def test_idx_reader_refuses_truncated_body(tmp_path: Path, tiny_idx: tuple) -> None:
    _, labels_path, *_ = tiny_idx
    raw = gzip.decompress(tiny_idx[0].read_bytes())[:-3]
    (tmp_path / "cut").write_bytes(raw)
    with pytest.raises(DataError, match="truncated or corrupt"):
        load_mnist_idx(tmp_path / "cut", labels_path)


def test_idx_reader_refuses_truncated_gzip_and_header(tmp_path: Path, tiny_idx: tuple) -> None:
    images_path, labels_path, *_ = tiny_idx
    (tmp_path / "cut.gz").write_bytes(images_path.read_bytes()[:-10])
    with pytest.raises(DataError, match=r"cut\.gz: unreadable or corrupt"):
        load_mnist_idx(tmp_path / "cut.gz", labels_path)
    (tmp_path / "short").write_bytes(b"\x00\x00\x08")
    with pytest.raises(DataError, match="truncated IDX header"):
        load_mnist_idx(tmp_path / "short", labels_path)


def test_idx_reader_refuses_count_mismatch_and_bad_labels(tmp_path: Path, tiny_idx: tuple) -> None:
    images_path, *_ = tiny_idx
    write_idx(tmp_path / "two", 2049, np.array([1, 2]), compress=False)
    with pytest.raises(DataError, match=r"3 images but .* has 2 labels"):
        load_mnist_idx(images_path, tmp_path / "two")
    write_idx(tmp_path / "big", 2049, np.array([1, 2, 10]), compress=False)
    with pytest.raises(DataError, match=r"label 10 outside 0\.\.9"):
        load_mnist_idx(images_path, tmp_path / "big")


def test_idx_reader_missing_file(tmp_path: Path, tiny_idx: tuple) -> None:
    with pytest.raises(DataError, match="file not found"):
        load_mnist_idx(tmp_path / "nope", tiny_idx[1])


@pytest.mark.skipif(not MNIST_IMAGES.exists(), reason="real MNIST files not present")
def test_real_mnist_test_set() -> None:
    data = load_dataset("mnist", SHARED)
    assert data.x.shape == (10_000, 1, 28, 28)
    assert data.x.min() >= 0.0 and data.x.max() == 1.0
    counts = np.bincount(data.y, minlength=10)
    assert len(counts) == 10 and counts.min() > 800 and counts.max() < 1200


# ---------------------------------------------------------------- credit CSV

TINY_CSV = "LIMIT_BAL,SEX,AGE,PAY_0,default\n1000.5,1,30,-1,0\n2000,2,40,2,1\n3000,1,50,0,0\n"


def write_csv(tmp_path: Path, text: str, name: str = "credit.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_credit_reader_uses_row_numbers_and_first_columns(tmp_path: Path) -> None:
    data = load_credit_csv(write_csv(tmp_path, TINY_CSV), columns=3)
    assert data.kind == "tabular" and data.num_classes == 2
    assert data.x.dtype == np.float32
    np.testing.assert_allclose(data.x, [[1000.5, 1, 30], [2000, 2, 40], [3000, 1, 50]])
    assert data.y.tolist() == [0, 1, 0] and data.y.dtype == np.int64
    assert data.ids.tolist() == ["credit-0", "credit-1", "credit-2"]
    assert load_credit_csv(tmp_path / "credit.csv", columns=None).x.shape == (3, 4)


def test_credit_reader_skips_an_id_column(tmp_path: Path) -> None:
    with_id = "ID," + TINY_CSV.replace("\n1000", "\n1,1000").replace("\n2000", "\n2,2000")
    path = write_csv(tmp_path, with_id.replace("\n3000", "\n3,3000"))
    data = load_credit_csv(path, columns=None)
    assert data.x.shape == (3, 4)  # ID is neither a feature nor the sample ID
    assert data.x[0, 0] == 1000.5 and data.ids[0] == "credit-0"


CSV_ERRORS = {
    "ragged": (TINY_CSV + "4000,1,30\n", "data row 3 has 3 fields, the header has 5"),
    "text": (TINY_CSV.replace("40", "forty"), "data row 1, column 'AGE': 'forty'"),
    "empty cell": (TINY_CSV.replace(",30,", ",,"), "data row 0, column 'AGE': ''"),
    "nan": (TINY_CSV.replace("3000", "nan"), "data row 2, column 'LIMIT_BAL': 'nan'"),
    "label": (TINY_CSV.replace(",1\n", ",2\n"), "column 'default': label 2 is not 0 or 1"),
    "no label column": (TINY_CSV.replace("default", "target"), "no label column"),
    "header only": ("A,default\n", "no data rows"),
    "binary junk": ("\udcff", "unreadable CSV"),
}


@pytest.mark.parametrize("case", list(CSV_ERRORS))
def test_credit_reader_names_row_and_column_of_bad_data(tmp_path: Path, case: str) -> None:
    text, needle = CSV_ERRORS[case]
    path = tmp_path / "bad.csv"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.raises(DataError) as info:
        load_credit_csv(path, columns=None)
    assert "\n" not in str(info.value) and str(path) in str(info.value)
    assert needle in str(info.value)


def test_credit_reader_refuses_too_many_columns(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="between 1 and 4"):
        load_credit_csv(write_csv(tmp_path, TINY_CSV), columns=20)


@pytest.mark.skipif(not CREDIT_CSV.exists(), reason="real credit CSV not present")
def test_real_credit_file() -> None:
    data = load_dataset("credit", CREDIT_CSV)
    assert data.x.shape == (30_000, 20) and len(set(data.ids.tolist())) == 30_000
    assert 0.21 < data.y.mean() < 0.23
    assert data.x[0, 0] == 20000.0  # LIMIT_BAL of the first row, raw (unstandardised)


# ---------------------------------------------------------------- dispatch


def test_unknown_dataset_lists_known_names() -> None:
    with pytest.raises(DataError, match=r"unknown data set 'cifar' \(known: digits, mnist, credit"):
        load_dataset("cifar")


def test_missing_source_names_the_expected_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"t10k-images-idx3-ubyte\.gz"):
        load_dataset("mnist", tmp_path)
    with pytest.raises(DataError, match=r"UCI_Credit_Card\.csv"):
        load_dataset("credit", tmp_path)


def test_dispatch_finds_files_in_a_directory(tmp_path: Path, tiny_idx: tuple) -> None:
    write_csv(tmp_path, TINY_CSV, "UCI_Credit_Card.csv")
    assert len(load_dataset("credit", tmp_path, columns=2)) == 3
    tiny_idx[0].rename(tmp_path / "t10k-images-idx3-ubyte.gz")
    tiny_idx[1].rename(tmp_path / "t10k-labels-idx1-ubyte")
    assert load_dataset("mnist", tmp_path).x.shape == (3, 1, 4, 5)
    assert load_dataset("digits").name == "digits"


# ---------------------------------------------------------------- blocks


def test_digits_quadrants_reassemble_the_image() -> None:
    x = load_digits_dataset().x
    blocks = split_blocks(x, "image", 4)
    assert [b.shape for b in blocks] == [(1797, 1, 4, 4)] * 4
    top = np.concatenate(blocks[:2], axis=3)
    bottom = np.concatenate(blocks[2:], axis=3)
    np.testing.assert_array_equal(np.concatenate([top, bottom], axis=2), x)


def test_mnist_sized_strips() -> None:
    x = np.random.default_rng(0).random((3, 1, 28, 28), dtype=np.float32)
    blocks = split_blocks(x, "image", 4, "strips")
    assert [b.shape for b in blocks] == [(3, 1, 28, 7)] * 4
    np.testing.assert_array_equal(np.concatenate(blocks, axis=3), x)
    assert [b.shape[3] for b in split_blocks(x[..., :8], "image", 3)] == [3, 3, 2]


def test_credit_sized_columns() -> None:
    x = np.arange(6 * 20, dtype=np.float32).reshape(6, 20)
    blocks = split_blocks(x, "tabular", 4)
    assert [b.shape for b in blocks] == [(6, 5)] * 4
    np.testing.assert_array_equal(blocks[1], x[:, 5:10])


@pytest.mark.parametrize(
    ("shape", "kind", "k", "layout", "needle"),
    [
        ((2, 1, 8, 8), "image", 0, "auto", "at least 1"),
        ((2, 1, 8, 8), "image", 9, "strips", "8-pixel-wide"),
        ((2, 1, 8, 8), "image", 3, "quadrants", "exactly 4"),
        ((2, 1, 8, 8), "image", 4, "columns", "not for images"),
        ((2, 5), "tabular", 4, "quadrants", "not for tabular"),
        ((2, 5), "tabular", 6, "auto", "cannot cut 5 columns into 6"),
    ],
)
def test_impossible_splits_are_config_errors(
    shape: tuple[int, ...], kind: str, k: int, layout: str, needle: str
) -> None:
    with pytest.raises(ConfigError, match=needle):
        split_blocks(np.zeros(shape, dtype=np.float32), kind, k, layout)  # type: ignore[arg-type]


def test_wrong_rank_is_a_data_error() -> None:
    with pytest.raises(DataError, match="must be"):
        split_blocks(np.zeros((2, 5)), "image", 2)
