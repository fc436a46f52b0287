"""Tables nobody here wrote: odd but real CSV and Parquet files. Each is read correctly (as
docs/tables.md says) or refused with one line naming the file and what is wrong (never a
traceback, never a cell silently lost). Tiny files, fast checks."""

from __future__ import annotations

import datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from vfl_cli.app import app
from vfl_core.data.party_dir import PartyData
from vfl_core.data.preprocess import ColumnSpec, TabularPreprocessor
from vfl_core.data.tabular import TableSource, load_table_party
from vfl_core.errors import DataError


def write(path: Path, content: str | bytes | pa.Table) -> Path:
    if isinstance(content, pa.Table):
        pq.write_table(content, path)
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8", newline="")  # line ends as given
    return path


def load(
    path: Path, id_column: str = "id", label: str | None = "y", **kw: object
) -> tuple[PartyData, TabularPreprocessor]:
    """Every row a training row (no test split), so rows keep the file's order."""
    source = TableSource(
        path=path, id_column=id_column, label_column=label, block=0, num_blocks=2,
        test_fraction=0.0, **kw,
    )  # fmt: skip
    return load_table_party(source)


def spec(fitted: TabularPreprocessor, name: str) -> ColumnSpec:
    return next(c for c in fitted.columns if c.name == name)


def refused(path: Path, *words: str, **kw: object) -> str:
    """The one-line error loading `path` gives; it names the file and each of `words`."""
    with pytest.raises(DataError) as caught:
        load(path, **kw)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{path}: "), message
    for word in words:
        assert word in message, message
    return message


# ---------------------------------------------------------------- how a CSV file is written


def test_given_a_utf8_byte_order_mark_then_the_first_column_is_named_without_it(
    tmp_path: Path,
) -> None:
    path = write(tmp_path / "t.csv", "\ufeffid,a,y\n1,2.5,yes\n2,3.5,no\n".encode())
    data, fitted = load(path)
    assert data.splits["train"].ids.tolist() == ["1", "2"]
    assert spec(fitted, "a").mean == 3.0


def test_given_crlf_line_ends_then_no_cell_keeps_a_carriage_return(tmp_path: Path) -> None:
    path = write(tmp_path / "t.csv", b"id,c,y\r\n1,x,yes\r\n2,z,no\r\n")
    data, fitted = load(path)
    assert spec(fitted, "c").categories == ("x", "z")
    assert fitted.classes == ("no", "yes")
    assert data.splits["train"].ids.tolist() == ["1", "2"]


def test_given_quoted_fields_with_commas_and_line_breaks_then_read_as_one_cell_each(
    tmp_path: Path,
) -> None:
    path = write(tmp_path / "t.csv", 'id,note,y\n1,"x, y",yes\n2,"two\nlines",no\n3,z,no\n')
    data, fitted = load(path)
    assert spec(fitted, "note").categories == ("two\nlines", "x, y", "z")
    assert data.splits["train"].ids.tolist() == ["1", "2", "3"]


def test_given_a_semicolon_file_with_decimal_commas_then_sniffed_and_read_as_numbers(
    tmp_path: Path,
) -> None:
    # decided: sniffed (docs/tables.md), as a European spreadsheet's export is written
    path = write(tmp_path / "t.csv", "id;a;b;y\n1;2,5;x;yes\n2;3,5;z;no\n")
    _, fitted = load(path)
    assert (spec(fitted, "a").kind, spec(fitted, "a").mean) == ("numeric", 3.0)
    assert spec(fitted, "b").categories == ("x", "z")


def test_given_a_trailing_empty_line_then_the_same_rows_as_without(tmp_path: Path) -> None:
    plain, _ = load(write(tmp_path / "a.csv", "id,a,y\n1,5,yes\n2,6,no\n"))
    trailing, _ = load(write(tmp_path / "b.csv", "id,a,y\n1,5,yes\n2,6,no\n\n"))
    assert trailing.splits["train"].ids.tolist() == plain.splits["train"].ids.tolist()
    np.testing.assert_array_equal(trailing.splits["train"].features, plain.splits["train"].features)


def test_given_lines_of_spaces_then_blank_and_later_lines_named_as_an_editor_counts(
    tmp_path: Path,
) -> None:
    plain, _ = load(write(tmp_path / "a.csv", "id,a,y\n1,5,yes\n2,6,no\n"))
    spaced, _ = load(write(tmp_path / "b.csv", "id,a,y\n1,5,yes\n \t\n2,6,no\n   \n"))
    assert spaced.splits["train"].ids.tolist() == plain.splits["train"].ids.tolist()
    rows = "".join(f"{i};{i};no\n" for i in range(3, 14))
    path = write(tmp_path / "c.csv", "id;a;y\n1;5;yes\n   \n2;oops;no\n" + rows)
    refused(path, "column 'a' holds numbers but for 1 of its 13", "'oops' at line 4")  # `;` found
    refused(write(tmp_path / "d.csv", "id,a,y\n1,5,yes\n  \n2,6\n"), "line 4 has 2 fields")


def test_given_a_header_only_file_then_refused(tmp_path: Path) -> None:
    refused(write(tmp_path / "t.csv", "id,a,y\r\n"), "no data rows after the header")
    refused(write(tmp_path / "e.csv", ""), "empty file (no header line)")


# ---------------------------------------------------------------- columns


def test_given_boolean_columns_then_two_categories_each_as_written(tmp_path: Path) -> None:
    # decided: true/false and yes/no are categories (one-hot), cells as written (case kept)
    path = write(tmp_path / "t.csv", "id,a,b,y\n1,true,yes,yes\n2,false,no,no\n3,true,no,no\n")
    data, fitted = load(path)
    assert (spec(fitted, "a").kind, spec(fitted, "a").categories) == ("onehot", ("false", "true"))
    assert spec(fitted, "b").categories == ("no", "yes")
    # one-hot: [false, true, unknown], then [no, yes, unknown]
    np.testing.assert_array_equal(data.splits["train"].features[0], [0, 1, 0, 0, 1, 0])


def test_given_iso_dates_and_times_then_days_since_1970(tmp_path: Path) -> None:
    rows = "1,2024-03-01,2024-03-01 12:00:00,yes\n2,2024-03-03,2024-03-01T18:00:00,no\n"
    path = write(tmp_path / "t.csv", "id,d,t,y\n" + rows)
    _, fitted = load(path)
    day = (datetime.date(2024, 3, 2) - datetime.date(1970, 1, 1)).days
    assert (spec(fitted, "d").dates, spec(fitted, "d").mean) == (True, day)
    assert spec(fitted, "t").mean == pytest.approx(day - 1 + 0.625)


@pytest.mark.parametrize("cell", ["03/01/2024", "3/1/24", "01.03.2024", "01-03-2024 10:00"])
def test_given_dates_written_a_countrys_way_then_refused_naming_the_column(
    tmp_path: Path, cell: str
) -> None:
    path = write(tmp_path / "t.csv", f"id,d,y\n1,{cell},yes\n2,,no\n3,{cell},no\n")
    refused(path, "column 'd' holds dates written as", repr(cell), "line 2", "ISO dates")


def test_given_iso_dates_and_dates_written_a_countrys_way_in_one_column_then_refused(
    tmp_path: Path,
) -> None:
    # two systems' exports in one column (stop-40 QA): before, 940 categories and exit 0
    rows = "1,2024-03-01,yes\n2,,no\n3,2024-03-05,no\n4,05/03/2024,yes\n5,2024-03-09,no\n"
    path = write(tmp_path / "t.csv", "id,d,y\n" + rows)
    refused(path, "column 'd' holds dates written as '05/03/2024' (line 5), beside ISO dates")
    text = write(tmp_path / "u.csv", "id,d,y\n1,2024-03-01,yes\n2,soon,no\n3,05/03/2024,no\n")
    _, fitted = load(text)  # not every cell a date: a text column, as before
    assert spec(fitted, "d").kind == "onehot"


def test_given_a_column_of_one_value_then_kept_without_dividing_by_zero(tmp_path: Path) -> None:
    path = write(tmp_path / "t.csv", "id,a,b,y\n1,5,k,yes\n2,5,k,no\n3,5,k,no\n")
    data, fitted = load(path)
    assert (spec(fitted, "a").mean, spec(fitted, "a").std) == (5.0, 1.0)
    assert spec(fitted, "b").categories == ("k",)
    features = data.splits["train"].features
    assert np.isfinite(features).all() and (features[:, 0] == 0).all()


@pytest.mark.parametrize("header", ["id,a,a,y", "id,a, a ,y"])
def test_given_a_column_named_twice_then_refused_naming_it(tmp_path: Path, header: str) -> None:
    path = write(tmp_path / "t.csv", f"{header}\n1,5,6,yes\n2,5,7,no\n")
    refused(path, "column 'a' appears twice in the header")


def test_given_a_numeric_column_with_na_null_and_empty_cells_then_missing_not_text(
    tmp_path: Path,
) -> None:
    rows = "1,NA,1,yes\n2,null,1,no\n3,,1,no\n4, 7 ,1,yes\n5,9,1,no\n"
    path = write(tmp_path / "t.csv", "id,a,b,y\n" + rows)
    data, fitted = load(path)
    a = spec(fitted, "a")
    assert (a.kind, a.indicator, a.mean) == ("numeric", True, 8.0)
    # a's [was missing, standardised value] (a missing value is the mean: 0), then b's
    split = data.splits["train"]
    rows = dict(zip(split.ids.tolist(), split.features.tolist(), strict=True))
    assert rows["1"] == rows["2"] == rows["3"] == [1.0, 0.0, 0.0]
    assert rows["4"] == [0.0, -1.0, 0.0] and rows["5"] == [0.0, 1.0, 0.0]


def test_given_huge_integers_then_numbers_and_too_large_ones_refused(tmp_path: Path) -> None:
    rows = "1,123456789012345678901234567890,yes\n2,9223372036854775807,no\n3,1,no\n"
    path = write(tmp_path / "t.csv", "id,a,y\n" + rows)
    data, fitted = load(path)
    assert spec(fitted, "a").kind == "numeric"
    features = data.splits["train"].features
    assert np.isfinite(features).all() and features[0, 0] > features[1, 0] >= features[2, 0]
    path = write(tmp_path / "big.csv", "id,a,y\n1,1e300,yes\n2,-1e300,no\n")
    refused(path, "column 'a' holds numbers too large to standardise (up to 1e+300)")


# ---------------------------------------------------------------- IDs and labels


def test_given_a_duplicated_id_then_refused_naming_both_lines(tmp_path: Path) -> None:
    path = write(tmp_path / "t.csv", "id,a,y\n1,5,yes\n1,6,no\n")
    refused(path, "duplicate ID '1' at line 3 (first at line 2)")


def test_given_ids_with_leading_zeros_then_kept_as_written(tmp_path: Path) -> None:
    # the rule: an ID is its text; only a zero fraction is dropped (12345.0 is 12345)
    path = write(tmp_path / "t.csv", "id,a,y\n00123,5,yes\n123,6,no\n7.0,7,no\n")
    data, _ = load(path)
    assert data.splits["train"].ids.tolist() == ["00123", "123", "7"]


def test_given_unicode_ids_and_column_names_then_read_as_written(tmp_path: Path) -> None:
    path = write(tmp_path / "t.csv", "клиент,âge,ville,y\nü1,5,Zürich,oui\n日本,6,Köln,non\n")
    data, fitted = load(path, id_column="клиент")
    assert data.splits["train"].ids.tolist() == ["ü1", "日本"]
    assert spec(fitted, "âge").mean == 5.5 and spec(fitted, "ville").categories == (
        "Köln",
        "Zürich",
    )
    assert fitted.classes == ("non", "oui")


@pytest.mark.parametrize("cell", ["", "NaN", "NA"])
def test_given_a_label_cell_blank_or_nan_then_refused_naming_its_line(
    tmp_path: Path, cell: str
) -> None:
    path = write(tmp_path / "t.csv", f"id,a,y\n1,5,yes\n2,6,{cell}\n3,7,no\n")
    refused(path, "line 3, column 'y': no label (1 of 3 rows have none)")


# ---------------------------------------------------------------- Parquet


def test_given_parquet_with_nulls_and_nan_then_missing_and_a_null_label_refused(
    tmp_path: Path,
) -> None:
    columns = {
        "id": pa.array([1, 2, 3, 4]),
        "a": pa.array([1.0, None, 3.0, float("nan")]),
        "n": pa.array([1, 2, None, 5], pa.int32()),
        "s": pa.array(["x", "y", "y", None]),
    }
    table = pa.table({**columns, "y": ["yes", "no", "yes", "no"]})
    data, fitted = load(write(tmp_path / "t.parquet", table))
    assert [(c.name, c.kind, c.indicator) for c in fitted.columns] == [
        ("a", "numeric", True),
        ("n", "numeric", True),
        ("s", "onehot", True),
    ]
    assert (spec(fitted, "a").mean, spec(fitted, "n").mean) == (2.0, 8 / 3)
    assert spec(fitted, "s").categories == ("x", "y")
    assert data.splits["train"].ids.tolist() == ["1", "2", "3", "4"]
    bad = write(tmp_path / "bad.parquet", pa.table({**columns, "y": ["yes", "no", None, "no"]}))
    refused(bad, "row 2, column 'y': no label")


def test_given_parquet_dictionary_strings_then_categories_and_ids_as_text(tmp_path: Path) -> None:
    table = pa.table(
        {
            "id": pa.array(["a", "b", "c"]).dictionary_encode(),
            "s": pa.array(["x", "y", "x"]).dictionary_encode(),
            "y": pa.array(["1", "0", "1"]).dictionary_encode(),
        }
    )
    data, fitted = load(write(tmp_path / "t.parquet", table))
    assert data.splits["train"].ids.tolist() == ["a", "b", "c"]
    assert spec(fitted, "s").categories == ("x", "y") and fitted.classes == ("0", "1")


def test_given_parquet_names_with_dots_then_each_column_read_as_itself(tmp_path: Path) -> None:
    # a Parquet file is read a column at a time, by name: "a" must not select "a.b" too
    columns = {"id": ["1", "2"], "a": [1.0, 3.0], "a.b": [5.0, 9.0], "é ü": ["x", "y"]}
    _, fitted = load(write(tmp_path / "t.parquet", pa.table(columns)), label=None)
    assert [(c.name, c.mean) for c in fitted.columns[:2]] == [("a", 2.0), ("a.b", 7.0)]
    assert spec(fitted, "é ü").categories == ("x", "y")


def test_given_parquet_booleans_then_the_categories_false_and_true(tmp_path: Path) -> None:
    columns = {"id": ["a", "b", "c"], "b": [True, False, None], "n": [1.0, 1.0, 1.0]}
    table = pa.table({**columns, "y": [True, False, True]})
    data, fitted = load(write(tmp_path / "t.parquet", table))
    assert (spec(fitted, "b").categories, spec(fitted, "b").indicator) == (("False", "True"), True)
    assert fitted.classes == ("False", "True")
    # b's [was missing], one-hot [False, True, unknown]; n's standardised value
    features = data.splits["train"].features
    np.testing.assert_array_equal(features, [[0, 0, 1, 0, 0], [0, 1, 0, 0, 0], [1, 0, 0, 0, 0]])


@pytest.mark.parametrize("kind", [pa.int64(), pa.uint64(), pa.float64()])
def test_given_parquet_integer_ids_then_written_plainly(tmp_path: Path, kind: pa.DataType) -> None:
    largest = {"int64": 2**63 - 1, "uint64": 2**64 - 1, "double": 2**40}[str(kind)]
    ids = pa.array([1, 2, largest], kind)
    table = pa.table({"id": ids, "a": [1.0, 2.0, 3.0], "y": ["p", "q", "p"]})
    data, _ = load(write(tmp_path / "t.parquet", table))
    assert data.splits["train"].ids.tolist() == ["1", "2", str(largest)]


def test_given_parquet_timestamps_and_dates_then_days_since_1970(tmp_path: Path) -> None:
    when = [datetime.datetime(2024, 1, 1, 12), None, datetime.datetime(2024, 1, 3, 12)]
    table = pa.table(
        {
            "id": ["a", "b", "c"],
            "ts": pa.array(when, pa.timestamp("ns", tz="UTC")),
            "d": pa.array([datetime.date(2024, 1, 1)] * 3, pa.date32()),
            "y": ["p", "q", "p"],
        }
    )
    _, fitted = load(write(tmp_path / "t.parquet", table))
    day = (datetime.date(2024, 1, 2) - datetime.date(1970, 1, 1)).days
    assert (spec(fitted, "ts").dates, spec(fitted, "ts").mean) == (True, day + 0.5)
    assert spec(fitted, "ts").indicator and spec(fitted, "d").mean == day - 1


def test_given_odd_parquet_files_then_refused_naming_what_is_wrong(tmp_path: Path) -> None:
    empty = pa.table({"id": pa.array([], pa.string()), "a": pa.array([], pa.float64())})
    refused(write(tmp_path / "empty.parquet", empty), "no data rows", label=None)
    twice = pa.table([pa.array(["a"]), pa.array([1.0]), pa.array([2.0])], names=["id", "a", "a"])
    refused(write(tmp_path / "twice.parquet", twice), "column 'a' appears twice", label=None)
    times = pa.table({"id": ["a"], "t": pa.array([datetime.time(1)], pa.time64("us"))})
    path = write(tmp_path / "times.parquet", times)
    refused(path, "column 't' has Parquet type time64[us]", label=None)


# ---------------------------------------------------------------- through a command


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("id,a,a,y\n1,5,6,yes\n2,5,7,no\n", "column 'a' appears twice"),
        ("id,d,y\n1,03/01/2024,yes\n2,04/15/2024,no\n", "column 'd' holds dates written as"),
        ("id,a,y\n1,5,yes\n2,6,\n", "line 3, column 'y': no label"),
    ],
)
def test_given_an_odd_table_when_prepared_then_one_error_line_and_exit_2(
    tmp_path: Path, text: str, message: str
) -> None:
    path = write(tmp_path / "t.csv", text)
    args = ["prepare", "--data", str(path), "--id-column", "id", "--label-column", "y"]
    args += ["--block", "0", "--clients", "2", "--out", str(tmp_path / "out")]
    result = CliRunner().invoke(app, args)
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith("error: ") and message in lines[0], result.output
