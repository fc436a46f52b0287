"""A large table's per-column work on two threads (issue 27 item 5: vfl_core.data.
column_threads): the read's typing of each column, the fit and the transform must give what one
thread gives, bit for bit, and the same first error in the columns' order."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest

from vfl_core.data import column_threads
from vfl_core.data.column_threads import each_column
from vfl_core.data.preprocess import threaded_rows
from vfl_core.data.table_files import read_table
from vfl_core.data.tabular import TableSource, load_table_party
from vfl_core.errors import DataError

ROWS = 600


def source(path: Path) -> TableSource:
    return TableSource(
        path=path, id_column="id", label_column="y", test_fraction=0.3, block=0, num_blocks=2
    )


def write(path: Path, bad: dict[str, range] | None = None) -> Path:
    """Numbers with gaps, counts, ISO dates, categories (one-hot, embedded, with spaced and
    missing cells), a mostly numeric text column and a label; `bad`: column -> rows whose
    cell there is "forty thousand"."""
    gen = np.random.default_rng(7)
    amounts = gen.normal(100, 30, ROWS)
    lines = ["id,amount,count,day,city,shop,mixed,income,y"]
    for i in range(ROWS):
        cells = {
            "amount": "" if i % 13 == 0 else f"{amounts[i]:.2f}",
            "count": str(i % 6),
            "day": f"2024-01-{i % 28 + 1:02d}",
            "city": ["Paris", " Lyon ", "Nice", "NA"][i % 4],
            "shop": f"shop-{i % 45}",
            "mixed": str(i) if i % 5 else "many",
            "income": str(30_000 + 97 * i),
        }
        for column, rows in (bad or {}).items():
            cells[column] = "forty thousand" if i in rows else cells[column]
        lines.append(f"u{i}," + ",".join(cells.values()) + f",{i % 3 % 2}")
    path.write_text("\n".join(lines) + "\n")
    return path


def load(path: Path, monkeypatch: pytest.MonkeyPatch, threads: bool) -> tuple:
    monkeypatch.setattr(column_threads, "MIN_ROWS", 0 if threads else 10**9)
    party, fitted = load_table_party(source(path))
    return fitted.to_json(), {name: split for name, split in party.splits.items()}


def test_given_a_large_table_when_loaded_on_two_threads_then_bit_identical_to_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path / "t.csv")
    fitted_one, splits_one = load(path, monkeypatch, threads=False)
    fitted_two, splits_two = load(path, monkeypatch, threads=True)
    assert fitted_two == fitted_one
    assert '"dates": true' in fitted_one and '"kind": "embedding"' in fitted_one
    assert splits_two.keys() == splits_one.keys() == {"train", "test"}
    for name, split in splits_one.items():
        np.testing.assert_array_equal(splits_two[name].ids, split.ids)
        np.testing.assert_array_equal(splits_two[name].labels, split.labels)
        assert splits_two[name].features.tobytes() == split.features.tobytes()


def test_given_two_bad_columns_when_loaded_on_two_threads_then_the_first_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path / "t.csv", bad={"amount": range(40, 50), "income": range(3, 13)})
    messages = []
    for threads in (False, True):
        with pytest.raises(DataError) as err:
            load(path, monkeypatch, threads)
        messages.append(str(err.value))
    assert messages[1] == messages[0]
    assert "column 'amount'" in messages[0] and "'forty thousand' at line 4" in messages[0]


def test_given_work_of_uneven_length_when_on_two_threads_then_in_order_and_the_first_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(column_threads, "MIN_ROWS", 10)
    names: set[str] = set()

    def work(item: int) -> int:
        names.add(threading.current_thread().name)
        time.sleep(0.02 if item == 0 else 0.0)  # the first finishes last
        if item in (1, 3):
            raise ValueError(f"item {item}")
        return item * 10

    assert list(each_column(lambda i: i * 10, range(6), rows=10)) == [0, 10, 20, 30, 40, 50]
    with pytest.raises(ValueError, match="item 1"):
        list(each_column(work, range(6), rows=10))
    assert names and all(n.startswith("table-column") for n in names)
    names.clear()
    assert list(
        each_column(lambda i: (names.add(threading.current_thread().name), i)[1], [1, 2], 9)
    ) == [1, 2]
    assert names == {threading.current_thread().name}  # a small table: the caller's thread


def test_given_a_parquet_table_when_fitted_then_on_one_thread(tmp_path: Path) -> None:
    csv_path = write(tmp_path / "t.csv")
    parquet_path = tmp_path / "t.parquet"
    pq.write_table(pa_csv.read_csv(csv_path), parquet_path)
    assert threaded_rows([read_table(csv_path)]) == ROWS
    assert threaded_rows([read_table(parquet_path)]) == 0
