"""A party's table through Arrow (issue 27 items 5 and 6): stray text in a numeric column is
named, Parquet keeps its types, numeric IDs have one spelling, rows are named by their line."""

from __future__ import annotations

import datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from vfl_core.data.sample_ids import held_out
from vfl_core.data.table_files import read_table
from vfl_core.data.tabular import (
    TableSource,
    federation_sources,
    load_table_federation,
    load_table_party,
)
from vfl_core.errors import DataError


def source(path: Path, **kw: object) -> TableSource:
    base = {"id_column": "id", "block": 0, "num_blocks": 2, "test_fraction": 0.0}
    return TableSource(path=path, **{**base, **kw})  # type: ignore[arg-type]


def test_given_one_text_cell_among_incomes_when_loading_then_error_names_file_column_cell_row(
    tmp_path: Path,
) -> None:
    rows = [f"u{i},{30_000 + 97 * i},{i % 9},{'yes' if i % 3 else 'no'}" for i in range(272)]
    rows.insert(40, "u999,forty thousand,4,no")  # line 42: the header is line 1
    path = tmp_path / "bank.csv"
    path.write_text("id,income,age,y\n" + "\n".join(rows) + "\n")
    with pytest.raises(DataError) as err:
        load_table_party(source(path, label_column="y"))
    message = str(err.value)
    assert message.startswith(f"{path}: column 'income' holds numbers but for 1 of its 273 ")
    assert "'forty thousand' at line 42" in message
    assert "leave it empty where it means missing" in message
    # emptied, the cell is missing: a numeric column with a missing indicator
    path.write_text(path.read_text().replace("forty thousand", ""))
    _, fitted = load_table_party(source(path, label_column="y"))
    assert fitted.columns[0].kind == "numeric" and fitted.columns[0].indicator


def test_given_many_stray_cells_when_refused_then_three_named_and_the_rest_counted(
    tmp_path: Path,
) -> None:
    cells = [str(i) for i in range(100)] + ["-", "n.a.", "-", "x", "-"]
    path = tmp_path / "t.csv"
    path.write_text("id,a\n" + "\n".join(f"u{i},{c}" for i, c in enumerate(cells)) + "\n")
    with pytest.raises(DataError) as err:
        load_table_party(source(path))
    assert "but for 5 of its 105 training cells: '-' at line 102, 'n.a.' at line 103, " in str(
        err.value
    )
    assert "and 2 more" in str(err.value)


@pytest.mark.parametrize("cell", ["1_000", "\u0661\u0662"])
def test_given_a_number_only_python_reads_when_loading_then_refused_as_stray_text(
    tmp_path: Path, cell: str
) -> None:
    # Arrow reads '1_000' and Arabic-Indic digits as text; float() reads both as numbers
    cells = [str(1000 + 7 * i) for i in range(100)] + [cell]
    path = tmp_path / "t.csv"
    path.write_text("id,a\n" + "\n".join(f"u{i},{c}" for i, c in enumerate(cells)) + "\n")
    with pytest.raises(DataError) as err:
        load_table_party(source(path))
    assert f"but for 1 of its 101 training cells: {cell!r} at line 102" in str(err.value)


def test_given_parquet_types_when_fitting_then_kept_not_guessed_from_text(tmp_path: Path) -> None:
    day = datetime.date(2024, 3, 1)
    data = pa.table(
        {
            "id": pa.array([1, 2, 3, 4], pa.int64()),
            "count": pa.array([1, 2, None, 4], pa.int32()),
            "amount": pa.array([1.5, float("nan"), 2.5, 3.5]),
            "code": ["10", "20", "10", "30"],  # text of digits: categories, as the file says
            "member": [True, False, True, None],
            "opened": pa.array([day, day, None, day + datetime.timedelta(days=2)], pa.date32()),
            "seen": pa.array(
                [datetime.datetime(2024, 3, 1, 12, tzinfo=datetime.UTC)] * 4,
                pa.timestamp("us", tz="UTC"),
            ),
            "cat": pa.array(["a", "b", "a", "b"]).dictionary_encode(),
        }
    )
    path = tmp_path / "t.parquet"
    pq.write_table(data, path)
    party, fitted = load_table_party(source(path))
    kinds = {c.name: (c.kind, c.indicator, c.dates) for c in fitted.columns}
    assert kinds == {
        "count": ("numeric", True, False),
        "amount": ("numeric", True, False),  # NaN is missing
        "code": ("onehot", False, False),
        "member": ("onehot", True, False),
        "opened": ("numeric", True, True),
        "seen": ("numeric", False, True),
        "cat": ("onehot", False, False),
    }
    specs = {c.name: c for c in fitted.columns}
    assert specs["code"].categories == ("10", "20", "30")
    assert specs["member"].categories == ("False", "True")
    assert specs["opened"].mean == pytest.approx(19783 + 2 / 3)  # days since 1970-01-01
    assert specs["seen"].mean == pytest.approx(19783.5)
    assert party.splits["train"].ids.tolist() == ["1", "2", "3", "4"]  # integers as written
    assert read_table(path).columns["amount"] == ["1.5", None, "2.5", "3.5"]


def test_given_ids_written_as_12345_and_12345_0_when_federated_then_they_align(
    tmp_path: Path,
) -> None:
    ids = [12345 + i for i in range(40)]
    bank, shop = tmp_path / "bank.csv", tmp_path / "shop.csv"
    bank.write_text("id,a,y\n" + "".join(f"{i},{i % 7},{i % 2}\n" for i in ids))
    shop.write_text("id,b\n" + "".join(f"{i}.0,{i % 5}\n" for i in ids))  # pandas' float IDs
    sources = federation_sources(
        [bank, shop], None, id_column="id", label_column="y", label_blocks=None
    )
    parties = load_table_federation(sources)
    held = [{i for s in p.splits.values() for i in s.ids.tolist()} for p in parties]
    assert held[0] == held[1] == {str(i) for i in ids}
    # each party's split agrees, since the split hashes the one spelling
    assert [sorted(p.splits) for p in parties] == [["test", "train"], ["test", "train"]]
    assert set(parties[0].splits["test"].ids) == set(parties[1].splits["test"].ids)
    # a float ID column in Parquet is read the same way
    pq.write_table(pa.table({"id": [float(i) for i in ids], "b": [1.0] * 40}), tmp_path / "s.pq")
    party, _ = load_table_party(source(tmp_path / "s.pq"))
    assert party.splits["train"].ids.tolist() == [str(i) for i in ids]


def test_given_two_spellings_of_one_id_in_a_file_when_loading_then_duplicate_named(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.csv"
    path.write_text("id,a\n7,1\n8,2\n7.00,3\n")
    with pytest.raises(DataError, match=r"t\.csv: duplicate ID '7' at line 4 \(first at line 2\)"):
        load_table_party(source(path))


def test_given_blank_lines_and_quoted_line_breaks_when_erring_then_the_line_is_named(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.csv"
    path.write_text('id,note,a\nu1,"two\nlines",1\n\nu2,x,2\nu3,y,3\n')
    table = read_table(path)
    assert table.columns["note"] == ["two\nlines", "x", "y"]
    assert [table.row_name(i) for i in range(3)] == ["line 3", "line 5", "line 6"]
    test = tmp_path / "test.csv"
    test.write_text('id,note,a\n\nu4,"a\nb",1\nu5,z,high\n')
    with pytest.raises(DataError, match=r"test\.csv: line 5, column 'a': 'high' is not a number"):
        load_table_party(source(path, test_path=test))


def test_given_ids_when_split_then_the_same_rows_as_the_sha256_rule_before_arrow() -> None:
    import hashlib

    ids = [f"C{i:05d}" for i in range(500)]
    got = held_out(pa.chunked_array([pa.array(ids)]), 0.25)
    salt = b"vfl-tabular-split\x00"
    want = [
        int.from_bytes(hashlib.sha256(salt + i.encode()).digest()[:8], "big") < int(0.25 * 2**64)
        for i in ids
    ]
    assert got.tolist() == want and 0.15 < np.mean(got) < 0.35


def test_given_rows_transformed_in_pieces_when_compared_then_the_same_rows_and_line_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vfl_core.data import preprocess

    path = tmp_path / "t.csv"
    path.write_text("id,a,c,d\n" + "".join(f"u{i},{i % 7},{'xyz'[i % 3]},{i}\n" for i in range(9)))
    whole, fitted = load_table_party(source(path, max_onehot=2))
    monkeypatch.setattr(preprocess, "TRANSFORM_ROWS", 2)
    monkeypatch.setattr(preprocess, "TRANSFORM_BLOCK_BYTES", 0)
    pieces, _ = load_table_party(source(path, max_onehot=2), fitted)
    np.testing.assert_array_equal(pieces.splits["train"].features, whole.splits["train"].features)
    assert pieces.splits["train"].features.flags.c_contiguous
    test = tmp_path / "test.csv"
    test.write_text("id,a,c,d\nv1,1,x,1\nv2,2,y,2\nv3,3,z,3\nv4,oops,x,4\n")
    with pytest.raises(DataError, match=r"test\.csv: line 5, column 'a': 'oops' is not a number"):
        load_table_party(source(path, max_onehot=2, test_path=test), fitted)


def test_given_a_non_number_in_a_test_row_of_one_file_when_loading_then_fit_numeric_and_named(
    tmp_path: Path,
) -> None:
    ids = [f"u{i}" for i in range(50)]
    first_test = int(np.flatnonzero(held_out(pa.chunked_array([pa.array(ids)]), 0.3))[0])
    cells = [str(i) if i != first_test else "oops" for i in range(50)]
    path = tmp_path / "t.csv"
    path.write_text("id,a\n" + "".join(f"{i},{c}\n" for i, c in zip(ids, cells, strict=True)))
    line = first_test + 2
    with pytest.raises(DataError, match=rf"line {line}, column 'a': 'oops' is not a number, but"):
        load_table_party(source(path, test_fraction=0.3))
