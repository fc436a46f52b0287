"""The fast paths of reading a party's table (issue 27 item 5): feature columns of numbers held
as numbers from the read, categories matched through dictionary codes, the parsed values
shared by the split's rows, IDs copied from Arrow's buffers. Each must give what the plain
path gives: a fit and transform of the same cells as text, row by row."""

from __future__ import annotations

import datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from vfl_core.data.columns import Table
from vfl_core.data.preprocess import TabularPreprocessor
from vfl_core.data.sample_ids import held_out, id_array
from vfl_core.data.table_files import read_table
from vfl_core.data.tabular import TableSource, load_table_party
from vfl_core.errors import DataError


def source(path: Path, **kw: object) -> TableSource:
    base = {"id_column": "id", "block": 0, "num_blocks": 2, "test_fraction": 0.0}
    return TableSource(path=path, **{**base, **kw})  # type: ignore[arg-type]


def plain(columns: dict[str, list[str | None]]) -> Table:
    """The same cells as a table built from text (no caches, nothing held as numbers)."""
    n = len(next(iter(columns.values())))
    return Table("t.csv", columns, [f"line {i + 2}" for i in range(n)])


def csv_text(columns: dict[str, list[str | None]]) -> str:
    rows = zip(*([c or "" for c in cells] for cells in columns.values()), strict=True)
    return ",".join(columns) + "\n" + "".join(",".join(row) + "\n" for row in rows)


def mixed_columns(n: int) -> dict[str, list[str | None]]:
    gen = np.random.default_rng(3)
    return {
        "id": [f"u{i}" for i in range(n)],
        "amount": [None if i % 11 == 0 else f"{v:.2f}" for i, v in enumerate(gen.normal(size=n))],
        "count": [str(i % 5) for i in range(n)],
        "city": [None if i % 7 == 0 else ["Paris", "Lyon", "Nice"][i % 3] for i in range(n)],
        "shop": [f"shop-{i % 40}" for i in range(n)],  # embedded (max_onehot 16)
        "mixed": [str(i) if i % 4 else "many" for i in range(n)],  # a quarter text: categories
    }


def test_given_a_split_table_when_loaded_then_each_split_as_the_plain_fit_and_transform(
    tmp_path: Path,
) -> None:
    columns = mixed_columns(300)
    path = tmp_path / "t.csv"
    path.write_text(csv_text(columns))
    party, fitted = load_table_party(source(path, test_fraction=0.3))
    test = held_out(pa.chunked_array([pa.array(columns["id"])]), 0.3)
    features = {k: v for k, v in columns.items() if k != "id"}
    rows = {"train": np.flatnonzero(~test), "test": np.flatnonzero(test)}
    split = {
        name: plain({k: [v[i] for i in index] for k, v in features.items()})
        for name, index in rows.items()
    }
    want = TabularPreprocessor.fit(split["train"])
    assert fitted.columns == want.columns
    assert [c.kind for c in fitted.columns] == [
        "numeric",
        "numeric",
        "onehot",
        "embedding",
        "embedding",
    ]
    for name in ("train", "test"):
        np.testing.assert_array_equal(
            party.splits[name].features, want.transform(split[name]), err_msg=name
        )
        assert party.splits[name].ids.tolist() == [columns["id"][i] for i in rows[name]]


def test_given_numbers_held_from_the_read_when_read_plainly_then_the_cells_stay_text(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.csv"
    path.write_text("id,a,b,y\n007,1.50,,1\n008,2,,0\n")
    assert read_table(path).columns["a"] == ["1.50", "2"]  # as written
    held = read_table(path, lambda name: name in ("a", "b"))
    assert held.held_as_numbers == ["a"]  # b has no value: left to the fit, which names it
    assert held.floats("a").tolist() == [1.5, 2.0]
    party, _ = load_table_party(source(path, label_column="y", features=("a",)))
    assert party.splits["train"].ids.tolist() == ["007", "008"]  # the ID is never a number


def test_given_an_empty_column_when_loaded_then_its_error_as_before(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("id,a,b\nu1,1,\nu2,2,NA\nu3,3, \n")
    with pytest.raises(DataError, match=r"column 'b' has no values in the training rows"):
        load_table_party(source(path))


def test_given_inf_among_numbers_when_loaded_then_named_as_stray_text(tmp_path: Path) -> None:
    cells = [str(i) for i in range(40)] + ["inf"]
    path = tmp_path / "t.csv"
    path.write_text("id,a\n" + "".join(f"u{i},{c}\n" for i, c in enumerate(cells)))
    with pytest.raises(DataError, match=r"'inf' at line 42"):
        load_table_party(source(path))


def test_given_a_fit_with_digit_categories_when_a_new_file_is_all_numbers_then_matched_as_text(
    tmp_path: Path,
) -> None:
    first = tmp_path / "first.csv"
    first.write_text("id,code\nu1,1\nu2,2\nu3,x\n")
    _, fitted = load_table_party(source(first))
    assert fitted.columns[0].categories == ("1", "2", "x")
    again = tmp_path / "again.csv"
    again.write_text("id,code\nv1,2\nv2,1\nv3,3\n")
    party, _ = load_table_party(source(again), fitted)
    # one-hot of 1, 2, x and unknown: "2" and "1" are known categories, "3" is not
    np.testing.assert_array_equal(
        party.splits["train"].features, [[0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 1]]
    )
    test = tmp_path / "test.csv"  # the same through a separate test file
    test.write_text("id,code\nw1,1\nw2,2\n")
    party, _ = load_table_party(source(first, test_path=test))
    np.testing.assert_array_equal(party.splits["test"].features, [[1, 0, 0, 0], [0, 1, 0, 0]])


def test_given_many_categories_unseen_and_missing_when_transformed_then_codes_as_plain(
    tmp_path: Path,
) -> None:
    n = 5000
    train = {"id": [f"u{i}" for i in range(n)], "tag": [f"t{i % 3000}" for i in range(n)]}
    test = {
        "id": [f"v{i}" for i in range(6)],
        "tag": ["t5", None, "new", "t2999", "t0", "other"],
    }
    path, test_path = tmp_path / "train.csv", tmp_path / "test.csv"
    path.write_text(csv_text(train))
    test_path.write_text(csv_text(test))
    party, fitted = load_table_party(source(path, test_path=test_path))
    want = TabularPreprocessor.fit(plain({"tag": train["tag"]}))
    assert fitted.columns == want.columns and fitted.columns[0].kind == "embedding"
    got = party.splits["test"].features[:, -1]
    np.testing.assert_array_equal(got, want.transform(plain({"tag": test["tag"]}))[:, -1])
    categories = fitted.columns[0].categories
    assert got.tolist() == [categories.index("t5") + 1, 0, 0, categories.index("t2999") + 1, 1, 0]


def test_given_quoted_cells_and_a_byte_order_mark_when_loaded_then_read_as_written(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.csv"
    text = 'id,note,amount\nu1,"a, b",1\nu2,"two\nlines",2\nu3,"say ""hi""",3\n'
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    party, fitted = load_table_party(source(path))
    note = fitted.columns[0]
    assert note.name == "note" and note.categories == ("a, b", 'say "hi"', "two\nlines")
    np.testing.assert_array_equal(party.splits["train"].features[:, :4], np.eye(4)[[0, 2, 1]])
    assert fitted.columns[1].mean == 2.0
    assert party.splits["train"].ids.tolist() == ["u1", "u2", "u3"]


def test_given_parquet_dictionary_and_timestamp_columns_when_split_then_as_plain(
    tmp_path: Path,
) -> None:
    n = 200
    start = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
    cities = [None if i % 9 == 0 else ["Paris", "Lyon"][i % 2] for i in range(n)]
    data = pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "city": pa.array(cities).dictionary_encode(),
            "seen": pa.array(
                [start + datetime.timedelta(hours=5 * i) for i in range(n)],
                pa.timestamp("ms", tz="UTC"),
            ),
        }
    )
    path = tmp_path / "t.parquet"
    pq.write_table(data, path, row_group_size=50)  # several row groups: several chunks
    party, fitted = load_table_party(source(path, test_fraction=0.25))
    assert [(c.kind, c.dates) for c in fitted.columns] == [("onehot", False), ("numeric", True)]
    test = held_out(pa.chunked_array([pa.array([str(i) for i in range(n)])]), 0.25)
    days = np.array([5 * i / 24 + 19723 for i in range(n)])  # 2024-01-01 is day 19723
    for name, rows in (("train", np.flatnonzero(~test)), ("test", np.flatnonzero(test))):
        features = party.splits[name].features
        city = [cities[i] for i in rows]
        want = np.array([[c == "Lyon", c == "Paris"] for c in city], dtype=np.float32)
        np.testing.assert_array_equal(features[:, 1:3], want)  # after the missing indicator
        assert features[:, 0].tolist() == [float(c is None) for c in city]
        spec = fitted.columns[1]
        np.testing.assert_allclose(
            features[:, -1], (days[rows] - spec.mean) / spec.std, rtol=1e-5, atol=1e-5
        )
        assert party.splits[name].ids.tolist() == [str(i) for i in rows]


def test_given_ids_in_pieces_when_copied_to_numpy_then_as_python_would_write_them() -> None:
    one_length = ["c01", "c02", "x y", "999"]  # copied as rows of the bytes
    for cells in (["a", "bcd", "x y ", ""], ["é€", "a"], [], ["12345", "7", "000012"], one_length):
        column = pa.chunked_array(
            [pa.array(cells[:2], pa.string()), pa.array(cells[2:], pa.string())]
        )
        got, want = id_array(column), np.array(cells, dtype=str)
        assert got.dtype == want.dtype and got.tolist() == want.tolist()
    sliced = pa.chunked_array([pa.array(["zz", "abc", "de"]).slice(1)])
    assert id_array(sliced).tolist() == ["abc", "de"]
    sliced = pa.chunked_array([pa.array(["zz", "ab", "cd"]).slice(1)])
    assert id_array(sliced).tolist() == ["ab", "cd"]


def test_given_marks_and_spaces_when_read_then_as_the_full_pass_of_every_cell(
    tmp_path: Path,
) -> None:
    from vfl_core.data.table_files import _missing_as_null

    columns: dict[str, list[str | None]] = {
        "id": ["u1", "u2", "u3", "u4"],
        "plain": ["a", "b", "NA", "c"],  # no cell spaced: read as Arrow read it
        "spaced": ["a", " NA ", "b ", "c"],
        "nbsp": ["é", "\u00a0N/A\u00a0", "x", "y"],
        "tab": ["1", "\t?", "2", "3"],  # read as the number column it is
    }
    path = tmp_path / "t.csv"
    path.write_text(csv_text(columns))
    got = read_table(path).columns
    for name, cells in columns.items():
        want = _missing_as_null(pa.chunked_array([pa.array(cells, pa.string())])).to_pylist()
        assert got[name] == want, name
    assert got["spaced"] == ["a", None, "b", "c"] and got["plain"] == ["a", "b", None, "c"]
    assert got["tab"] == ["1", None, "2", "3"]


@pytest.mark.parametrize(
    ("late", "error"),
    [
        ("forty thousand", r"'forty thousand' at line 102"),  # stray text past the first lines
        ("inf", r"'inf' at line 102"),  # read as a number by Arrow, text to the fit
        (" 250 ", None),  # spaces around a number: read again as text, then a number
    ],
)
def test_given_a_late_cell_in_a_column_of_numbers_when_loaded_then_as_if_read_as_text(
    tmp_path: Path, late: str, error: str | None
) -> None:
    cells = [str(i) for i in range(100)] + [late] + ["", "NA"]
    path = tmp_path / "t.csv"
    path.write_text("id,a\n" + "".join(f"u{i},{c}\n" for i, c in enumerate(cells)))
    if error is not None:
        with pytest.raises(DataError, match=error):
            load_table_party(source(path))
        return
    _, fitted = load_table_party(source(path))
    values = np.array([*range(100), 250.0])
    assert fitted.columns[0].kind == "numeric" and fitted.columns[0].indicator
    assert fitted.columns[0].mean == pytest.approx(values.mean())
    assert read_table(path).columns["a"][100] == "250"  # trimmed, as before


def test_given_two_tables_when_transformed_together_then_each_as_alone_and_columns_released_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from vfl_core.data import preprocess

    columns = {k: v for k, v in mixed_columns(60).items() if k != "id"}
    fitted = TabularPreprocessor.fit(plain(columns))
    first = plain({k: v[:45] for k, v in columns.items()})
    second = plain({k: v[45:] for k, v in columns.items()})
    alone = [fitted.transform(first), fitted.transform(second)]  # one block each
    monkeypatch.setattr(preprocess, "TRANSFORM_ROWS", 7)  # several blocks, the last one short
    monkeypatch.setattr(preprocess, "TRANSFORM_BLOCK_BYTES", 0)
    released: list[str] = []

    def done(name: str) -> None:
        released.append(name)
        for table in (first, second):
            table.forget(name)  # what load_table_party does: the column is gone for good

    together = fitted.transform_all([first, second], done)
    assert released == [c.name for c in fitted.columns]
    assert first.names == [] and second.names == []
    for got, want in zip(together, alone, strict=True):
        assert got.dtype == np.float32 and got.flags.c_contiguous
        np.testing.assert_array_equal(got, want)
