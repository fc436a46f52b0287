"""Tabular parties from their own tables: reading, preprocessing, labels, party directories."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import typer
from tabular_tables import LABEL_COLUMN, MERCHANTS, write_tables
from typer.testing import CliRunner

from vfl_cli.app import app
from vfl_cli.client_cmd import client
from vfl_core.config import ModelConfig, TrainConfig
from vfl_core.data.party_dir import PREPROCESS_FILE, load_party_dir
from vfl_core.data.preprocess import Table, TabularPreprocessor, parse_labels
from vfl_core.data.table_files import read_table
from vfl_core.data.tabular import (
    TableSource,
    load_table_party,
    load_table_party_kept,
    split_row_ids,
)
from vfl_core.errors import ConfigError, DataError
from vfl_core.model.models import TabularRepresentation, build_representation
from vfl_core.persistence.checkpoint import load_checkpoint, save_party_checkpoint
from vfl_core.training.alignment import UNMATCHED
from vfl_core.training.party import Party


def write_csv(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def table(**columns: list[str | None]) -> Table:
    n = len(next(iter(columns.values())))
    return Table("t.csv", dict(columns), [f"line {i + 2}" for i in range(n)])


def source(path: Path, **kw: object) -> TableSource:
    base = {"id_column": "id", "block": 0, "num_blocks": 2, "test_fraction": 0.0}
    return TableSource(path=path, **{**base, **kw})  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ preprocessor


def test_given_columns_when_fitting_then_numbers_are_numeric_and_the_rest_categorical() -> None:
    fitted = TabularPreprocessor.fit(
        table(a=["1", "2.5", "-3e2"], b=["1", "x", "2"], c=["red", "red", "blue"])
    )
    assert [(c.name, c.kind) for c in fitted.columns] == [
        ("a", "numeric"),
        ("b", "onehot"),
        ("c", "onehot"),
    ]
    assert fitted.columns[2].categories == ("blue", "red")


def test_given_numeric_column_when_transformed_then_standardised_with_training_statistics() -> None:
    fitted = TabularPreprocessor.fit(table(a=["1", "2", "3", "4"]))
    spec = fitted.columns[0]
    assert spec.mean == pytest.approx(2.5) and spec.std == pytest.approx(np.std([1, 2, 3, 4]))
    x = fitted.transform(table(a=["2.5", "6.5"]))
    assert x.dtype == np.float32 and x[:, 0] == pytest.approx([0.0, 4 / spec.std])


def test_given_iso_dates_when_fitting_then_numeric_in_days_and_checked_at_inference() -> None:
    opened = ["2024-03-01", "2024-03-03", None, "2024-03-02T12:00:00", "2024-03-05 00:00:00+02:00"]
    fitted = TabularPreprocessor.fit(table(opened=opened, odd=["2024-03-01", "soon", *"abc"]))
    spec = fitted.columns[0]
    assert spec.kind == "numeric" and spec.dates and spec.indicator
    days = [19783.0, 19785.0, 19784.5, 19787.0 - 2 / 24]  # days since 1970-01-01, UTC
    assert spec.mean == pytest.approx(np.mean(days)) and spec.std == pytest.approx(np.std(days))
    assert fitted.columns[1].kind == "onehot" and not fitted.columns[1].dates  # not all dates
    new = table(opened=["2024-03-02", None], odd=["x", "y"])
    got = fitted.transform(new)[:, 1]  # the indicator first, then the standardised day
    assert got == pytest.approx([(19784.0 - spec.mean) / spec.std, 0.0])
    with pytest.raises(DataError, match=r"line 2, column 'opened': '01/03/2024' is not an ISO"):
        fitted.transform(table(opened=["01/03/2024"], odd=["x"]))
    again = TabularPreprocessor.from_json(fitted.to_json(), "p.json")
    assert again == fitted and np.array_equal(again.transform(new), fitted.transform(new))


def test_given_missing_cells_when_transformed_then_imputed_with_a_missing_indicator() -> None:
    fitted = TabularPreprocessor.fit(
        table(a=["1", None, "3"], b=["x", "y", None], c=["1", "2", "3"])
    )
    assert [c.indicator for c in fitted.columns] == [True, True, False]
    x = fitted.transform(table(a=[None, "1"], b=[None, "y"], c=["2", None]))
    # a: indicator, value | b: indicator, x, y, unknown | c: value (no indicator)
    assert x.shape == (2, 2 + 4 + 1)
    np.testing.assert_array_equal(x[0, :6], [1, 0, 1, 0, 0, 0])  # mean imputed, all-zero one-hot
    np.testing.assert_allclose(x[1, :6], [0, -1, 0, 0, 1, 0])
    assert x[1, 6] == 0.0  # a gap at inference in a column without gaps: the mean


def test_given_threshold_when_fitting_then_small_columns_one_hot_and_large_ones_embedded() -> None:
    few, many = ["a", "b", "c", "a"], ["a", "b", "c", "d"]
    fitted = TabularPreprocessor.fit(table(few=few, many=many, n=["1", "2", "3", "4"]), 3)
    assert [c.kind for c in fitted.columns] == ["onehot", "embedding", "numeric"]
    assert fitted.cardinalities == (5,)  # 4 categories + unknown
    assert fitted.dense_width == 4 + 1 and fitted.width == 6
    x = fitted.transform(table(few=["b"], many=["c"], n=["1"]))
    np.testing.assert_array_equal(x[0, :4], [0, 1, 0, 0])
    assert x[0, -1] == 3.0  # code: 1 + index of "c"; the code columns come last


def test_given_numeric_bins_when_fitting_then_piecewise_linear_values_follow_the_standardised() -> (
    None
):
    """Gorishniy et al.'s PLE: a numeric column with more distinct values than bins gets its
    standardised value and one value per quantile bin (0 below, 1 above, linear inside); a
    column with few values (a flag) keeps its standardised value alone; the fit survives JSON."""
    values = [str(v) for v in range(1, 101)]
    t = table(x=values, flag=["0", "1"] * 50)
    fitted = TabularPreprocessor.fit(t, numeric_bins=4)
    x_spec, flag_spec = fitted.columns
    assert len(x_spec.edges) == 5 and flag_spec.edges == ()
    assert fitted.width == (1 + 4) + 1
    out = fitted.transform(table(x=["1", "50.5", "100", "1000"], flag=["0", "1", "0", "1"]))
    standardised = (np.array([1, 50.5, 100, 1000]) - x_spec.mean) / x_spec.std
    np.testing.assert_allclose(out[:, 0], standardised, rtol=1e-6)
    np.testing.assert_allclose(out[0, 1:5], [0, 0, 0, 0], atol=1e-6)  # the lowest edge
    np.testing.assert_allclose(out[1, 1:5], [1, 1, 0, 0], atol=1e-5)  # the median
    np.testing.assert_allclose(out[2, 1:5], [1, 1, 1, 1], atol=1e-6)  # the highest edge
    assert out[3, 4] > 1 and (out[3, 1:4] == 1).all()  # the last bin is open above
    again = TabularPreprocessor.from_json(fitted.to_json(), "p.json")
    np.testing.assert_array_equal(again.transform(t), fitted.transform(t))
    assert TabularPreprocessor.fit(t, numeric_bins=0).width == 2


def test_given_unseen_category_when_transformed_then_unknown_bucket_or_code_zero() -> None:
    fitted = TabularPreprocessor.fit(table(few=["a", "b", "a"], many=["p", "q", "r"]), 2)
    x = fitted.transform(table(few=["zzz", "b"], many=["zzz", "r"]))
    np.testing.assert_array_equal(x, [[0, 0, 1, 0], [0, 1, 0, 3]])  # a, b, unknown | code


def test_given_fitted_preprocessor_when_json_round_trip_then_equal_and_same_transform() -> None:
    t = table(a=["1", None, "3.5"], b=["x", "y", "x"], c=[str(i) + "k" for i in range(3)])
    fitted = TabularPreprocessor.fit(t, 2)
    again = TabularPreprocessor.from_json(fitted.to_json(), "p.json")
    assert again == fitted
    np.testing.assert_array_equal(again.transform(t), fitted.transform(t))
    with pytest.raises(DataError, match=r"p\.json: invalid preprocessing \(columns"):
        TabularPreprocessor.from_json('{"columns": []}', "p.json")


def test_given_text_in_a_numeric_column_at_inference_then_error_names_file_column_row() -> None:
    fitted = TabularPreprocessor.fit(table(age=["30", "40"]))
    with pytest.raises(DataError, match=r"t\.csv: line 3, column 'age': 'forty' is not a number"):
        fitted.transform(table(age=["35", "forty"]))
    with pytest.raises(DataError, match=r"t\.csv: column 'age' is missing"):
        fitted.transform(table(other=["1"]))


def test_given_a_column_without_values_when_fitting_then_error_names_it() -> None:
    with pytest.raises(DataError, match=r"column 'a' has no values in the training rows"):
        TabularPreprocessor.fit(table(a=[None, None]))


def test_given_labels_when_parsed_then_one_mapping_text_or_numeric_order() -> None:
    words = parse_labels(table(y=["yes", "no", "yes"]), "y")
    assert words.classes == ("no", "yes") and words.values.tolist() == [1, 0, 1]
    numbers = parse_labels(table(y=["10", "9", "2"]), "y")
    assert numbers.classes == ("2", "9", "10") and numbers.values.tolist() == [2, 1, 0]
    with pytest.raises(DataError, match=r"line 3, column 'y': label 'maybe' is not one of"):
        parse_labels(table(y=["no", "maybe"]), "y", ("no", "yes"))
    with pytest.raises(DataError, match=r"line 2, column 'y': no label"):
        parse_labels(table(y=[None, "no"]), "y")
    with pytest.raises(DataError, match=r"single class 'no'"):
        parse_labels(table(y=["no", "no"]), "y")


# ------------------------------------------------------------------------------ reading tables


def test_given_duplicate_id_when_loading_then_error_names_the_id_and_rows(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "t.csv", "id,a\nu1,1\nu2,2\nu1,3\n")
    with pytest.raises(DataError, match=r"t\.csv: duplicate ID 'u1' at line 4 \(first at line 2\)"):
        load_table_party(source(path))


def test_given_bad_files_when_loading_then_each_error_names_the_file_and_column(
    tmp_path: Path,
) -> None:
    empty = write_csv(tmp_path / "empty.csv", "")
    header_only = write_csv(tmp_path / "header.csv", "id,a\n")
    ok = write_csv(tmp_path / "ok.csv", "id,a,y\nu1,1,no\nu2,2,yes\n")
    no_id = write_csv(tmp_path / "noid.csv", "key,a\nu1,1\n")
    short = write_csv(tmp_path / "short.csv", "id,a\nu1,1\nu2\n")
    blank_id = write_csv(tmp_path / "blank.csv", "id,a\nu1,1\n ,2\n")
    cases = [
        (source(empty), r"empty\.csv: empty file \(no header line\)"),
        (source(header_only), r"header\.csv: no data rows"),
        (source(no_id), r"noid\.csv: no ID column 'id' \(columns: key, a\)"),
        (source(ok, label_column="default"), r"ok\.csv: no label column 'default'"),
        (source(ok, features=("a", "b")), r"ok\.csv: no feature column 'b'"),
        (source(short), r"short\.csv: line 3 has 1 fields, the header has 2"),
        (source(blank_id), r"blank\.csv: line 3, column 'id': no ID"),
        (source(tmp_path / "nope.csv"), r"nope\.csv: file not found"),
        (source(tmp_path / "x.xlsx"), r"x\.xlsx: file not found"),
    ]
    for src, message in cases:
        with pytest.raises(DataError, match=message):
            load_table_party(src)
    (tmp_path / "x.xlsx").write_text("")
    with pytest.raises(DataError, match=r"x\.xlsx: unknown table format"):
        read_table(tmp_path / "x.xlsx")


def test_given_spreadsheet_exports_when_read_then_the_same_table_as_plain_csv(
    tmp_path: Path,
) -> None:
    plain = write_csv(
        tmp_path / "plain.csv", 'id,amount,city,y\nu1,3.25,"Paris, FR",no\nu2,-1e3,Lyon,yes\n'
    )
    exports = {
        # a European spreadsheet: BOM, CRLF, semicolons, decimal commas
        "excel.csv": "\ufeffid;amount;city;y\r\nu1;3,25;Paris, FR;no\r\nu2;-1,0e3;Lyon;yes\r\n",
        "tabs.tsv": "id\tamount\tcity\ty\nu1\t3.25\tParis, FR\tno\nu2\t-1e3\tLyon\tyes\n",
        "pipes.csv": "id|amount|city|y\nu1|3.25|Paris, FR|no\nu2|-1e3|Lyon|yes\n",
    }
    expected = read_table(plain).columns
    assert expected["amount"] == ["3.25", "-1e3"] and expected["city"] == ["Paris, FR", "Lyon"]
    for name, text in exports.items():
        path = tmp_path / name
        path.write_bytes(text.encode())
        got = read_table(path).columns
        assert got["city"] == expected["city"] and got["y"] == expected["y"], name
        assert [float(v) for v in got["amount"]] == [3.25, -1000.0], name


def test_given_windows_encodings_when_read_then_decoded_and_warned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    text = "id;Betrag €;city\r\nu1;3,5;Zürich\r\nu2;4;São Paulo\r\n"
    files = {
        "cp1252.csv": text.encode("cp1252"),  # Excel's "CSV" on Windows
        "utf16.csv": text.encode("utf-16"),  # "Unicode text": a byte-order mark, then UTF-16
        "utf8.csv": text.encode("utf-8"),
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
        caplog.clear()
        with caplog.at_level("WARNING"):
            columns = read_table(tmp_path / name).columns
        assert columns == {
            "id": ["u1", "u2"],
            "Betrag €": ["3.5", "4"],
            "city": ["Zürich", "São Paulo"],
        }
        warned = [r.getMessage() for r in caplog.records]
        expect = ["is not UTF-8: read as Windows-1252"] if name == "cp1252.csv" else []
        assert [w.split(" ", 1)[1].split(" (")[0] for w in warned] == expect, warned
    # a byte Windows-1252 leaves undefined (0x81): Latin-1, which reads any byte
    (tmp_path / "latin1.csv").write_bytes(b"id,a\nu\x81,1\nu2,\xe9\n")
    with caplog.at_level("WARNING"):
        assert read_table(tmp_path / "latin1.csv").columns["a"] == ["1", "é"]
    assert "read as Latin-1" in caplog.records[-1].getMessage()


def test_given_a_utf8_bom_on_a_windows_1252_body_when_read_then_the_first_column_is_id(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes(b"\xef\xbb\xbf" + "id,city\nu1,Zürich\nu2,São Paulo\n".encode("cp1252"))
    with caplog.at_level("WARNING"):
        columns = read_table(path).columns
    assert columns == {"id": ["u1", "u2"], "city": ["Zürich", "São Paulo"]}
    assert "is not UTF-8: read as Windows-1252" in caplog.records[-1].getMessage()
    party, _ = load_table_party(
        TableSource(path=path, id_column="id", test_fraction=0.0, block=0, num_blocks=1)
    )
    assert party.splits["train"].ids.tolist() == ["u1", "u2"]


def test_given_separator_ending_every_line_when_read_then_the_empty_column_is_left_out(
    tmp_path: Path,
) -> None:
    path = write_csv(tmp_path / "t.csv", "id;a;\nu1;1;\nu2;2;\n")
    assert read_table(path).columns == {"id": ["u1", "u2"], "a": ["1", "2"]}
    named = write_csv(tmp_path / "v.csv", "id,,a\nu1,x,1\nu2,,2\n")  # values, no name
    with pytest.raises(DataError, match=r"v\.csv: header column 2 has no name"):
        read_table(named)


def test_given_rows_without_label_when_loading_then_error_counts_them(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "t.csv", "id,a,y\nu1,1,no\nu2,2,\nu3,3,yes\nu4,4,\n")
    with pytest.raises(DataError) as err:
        parse_labels(read_table(path), "y", None, "classification")
    assert "line 3, column 'y': no label (2 of 4 rows have none)" in str(err.value)
    assert "leave the samples whose label is unknown out of it" in str(err.value)


def test_given_digit_groups_when_read_then_numbers_where_unambiguous(tmp_path: Path) -> None:
    exports = {  # the same column as a US and a European spreadsheet write it
        "us.csv": 'id,amount,code\nu1,"1,234.50",1.234\nu2,12,2\nu3,"-3,000,000",3\n',
        "eu.csv": "id;amount;code\nu1;1.234,50;1.234\nu2;12;2\nu3;-3.000.000;3\n",
    }
    for name, text in exports.items():
        columns = read_table(write_csv(tmp_path / name, text)).columns
        assert [float(v) for v in columns["amount"]] == [1234.5, 12.0, -3e6], name
        # a lone 1.234 may be a decimal: a column with nothing else to tell stays as written
        assert columns["code"] == ["1.234", "2", "3"], name
    lone = read_table(write_csv(tmp_path / "lone.csv", 'id,n\nu1,"1,234"\nu2,5\n'))
    assert lone.columns["n"] == ["1,234", "5"]


def test_given_semicolons_when_a_column_has_commas_in_text_then_it_stays_text(
    tmp_path: Path,
) -> None:
    path = write_csv(tmp_path / "t.csv", "id;code;note\nu1;1,5;a, b\nu2;2;c\n")
    columns = read_table(path).columns
    assert columns["code"] == ["1.5", "2"]  # numbers with a decimal comma
    assert columns["note"] == ["a, b", "c"]  # not numbers: as written


def test_given_missing_marks_when_read_then_cells_are_missing(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "t.csv", "id,a,b\nu1,?,1\nu2,#N/A,<NA>\nu3, NA ,3\nu4,4,null\n")
    columns = read_table(path).columns
    assert columns["a"] == [None, None, None, "4"] and columns["b"] == ["1", None, "3", None]
    assert TabularPreprocessor.fit(table(a=columns["a"])).columns[0].kind == "numeric"


def test_given_a_few_marks_in_a_numeric_column_when_fitting_then_refused_naming_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # issue 27 item 5: these cells once made the column categorical (a category per number),
    # with a warning; now they are an error naming each cell and its row
    cells = [str(i) for i in range(30)]
    with pytest.raises(DataError) as err:
        TabularPreprocessor.fit(table(a=[*cells, "-", "inf"], b=[*"wxyz", *cells[:28]]))
    assert str(err.value).startswith(
        "t.csv: column 'a' holds numbers but for 2 of its 32 training cells: "
        "'-' at line 32, 'inf' at line 33."
    )
    with caplog.at_level("WARNING"):
        fitted = TabularPreprocessor.fit(table(b=[*"wxyz", *cells[:28]]))
    assert [c.kind for c in fitted.columns] == ["embedding"]  # 28 of 32 numbers: text
    assert not caplog.records


def test_given_a_column_unique_per_row_when_fitting_then_warned_as_an_identifier(
    caplog: pytest.LogCaptureFixture,
) -> None:
    accounts = [f"ACC-{i:05d}" for i in range(60)]
    cities = ["Paris", "Lyon", "Nice"] * 20
    with caplog.at_level("WARNING"):
        fitted = TabularPreprocessor.fit(table(account=accounts, city=cities))
        TabularPreprocessor.fit(table(account=accounts[:40]))  # too few rows to tell
    assert [c.kind for c in fitted.columns] == ["embedding", "onehot"]  # kept, as asked
    warned = [r.getMessage() for r in caplog.records]
    assert (
        len(warned) == 1
        and "column 'account' has 60 distinct values in 60 training rows, "
        "like an identifier or a timestamp"
        in warned[0]
    ), warned


def test_given_party_tables_when_split_by_id_then_shared_ids_land_in_the_same_split(
    tmp_path: Path,
) -> None:
    paths = write_tables(tmp_path, n=400)
    splits = {}
    for k, name in enumerate(("bank", "retail")):
        label = LABEL_COLUMN if name == "bank" else None
        src = source(paths[name], id_column="customer_id", label_column=label, block=k)
        data, _ = load_table_party(src.model_copy(update={"test_fraction": 0.25}))
        splits[name] = {s: set(split.ids.tolist()) for s, split in data.splits.items()}
    shared = (splits["bank"]["train"] | splits["bank"]["test"]) & (
        splits["retail"]["train"] | splits["retail"]["test"]
    )
    assert len(shared) > 200
    for sample in shared:
        assert (sample in splits["bank"]["test"]) == (sample in splits["retail"]["test"])
    n_test = len(splits["bank"]["test"])
    assert 0.15 < n_test / (n_test + len(splits["bank"]["train"])) < 0.35


def test_given_separate_test_file_when_loading_then_fit_on_train_rows_only(tmp_path: Path) -> None:
    train = write_csv(tmp_path / "train.csv", "id,a,c,y\nu1,1,x,no\nu2,3,y,yes\n")
    test = write_csv(tmp_path / "test.csv", "id,a,c,y\nu3,1000,new,yes\n")
    data, fitted = load_table_party(source(train, label_column="y", test_path=test))
    assert fitted.columns[0].mean == 2.0  # the test row's 1000 did not move it
    assert data.splits["test"].labels.tolist() == [1]
    np.testing.assert_array_equal(data.splits["test"].features[0, 1:], [0, 0, 1])  # unknown "new"
    clash = write_csv(tmp_path / "clash.csv", "id,a,c,y\nu2,1,x,no\n")
    with pytest.raises(DataError, match=r"clash\.csv: line 2: ID 'u2' is also a training row"):
        load_table_party(source(train, label_column="y", test_path=clash))
    changed = write_csv(tmp_path / "changed.csv", "id,a,c,y\nu4,n/a,x,no\nu5,high,x,no\n")
    with pytest.raises(DataError, match=r"changed\.csv: line 3, column 'a': 'high' is not a num"):
        load_table_party(source(train, label_column="y", test_path=changed))


def test_given_parquet_table_when_loading_then_same_party_as_from_csv(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    csv_path = write_csv(tmp_path / "t.csv", "id,a,c,y\nu1,1.5,x,no\nu2,,y,yes\nu3,2,,no\n")
    table_ = pa.table(
        {
            "id": ["u1", "u2", "u3"],
            "a": [1.5, None, 2.0],
            "c": ["x", "y", None],
            "y": ["no", "yes", "no"],
        }
    )
    pq.write_table(table_, tmp_path / "t.parquet")
    from_csv, _ = load_table_party(source(csv_path, label_column="y"))
    from_parquet, _ = load_table_party(source(tmp_path / "t.parquet", label_column="y"))
    for name in ("ids", "features", "labels"):
        np.testing.assert_array_equal(
            getattr(from_csv.splits["train"], name), getattr(from_parquet.splits["train"], name)
        )


def test_given_no_pyarrow_when_reading_parquet_then_error_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.parquet"
    path.write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(DataError, match=r"t\.parquet: reading Parquet needs pyarrow .*\[parquet\]"):
        read_table(path)


# ------------------------------------------------------------------------------ the party


def test_given_categorical_codes_when_building_the_model_then_embedded_and_they_matter() -> None:
    config = ModelConfig(embed_dim=4, hidden=(8,))
    model = build_representation(config, (5,), 0, categorical=(3, 7))
    assert isinstance(model, TabularRepresentation)
    assert [e.num_embeddings for e in model.embeddings] == [3, 7]
    x = torch.tensor([[0.1, -0.2, 0.3, 1.0, 6.0], [0.1, -0.2, 0.3, 2.0, 6.0]])
    out = model(x)
    assert out.shape == (2, 4) and not torch.allclose(out[0], out[1])
    with pytest.raises(ConfigError, match="categorical"):
        build_representation(config, (1, 4, 4), 0, categorical=(3,))


def test_given_prepare_csv_when_run_then_party_directory_with_its_preprocessing(
    tmp_path: Path,
) -> None:
    paths = write_tables(tmp_path, n=300)
    out = tmp_path / "retail"
    args = ["prepare", "--data", str(paths["retail"]), "--id-column", "customer_id"]
    args += ["--block", "1", "--clients", "3", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "merchant_name: embedding (40 categories), missing indicator" in result.output
    data = load_party_dir(out)
    fitted = TabularPreprocessor.model_validate(json.loads((out / PREPROCESS_FILE).read_text()))
    assert data.preprocessing == fitted.model_dump(mode="json")
    assert data.meta.categorical == (len(MERCHANTS) + 1,) and not data.meta.has_labels
    assert data.meta.feature_shape == (fitted.width,) and data.meta.num_classes == 2
    # reusing the saved fit on new rows: no refit, the same transform
    again = tmp_path / "again"
    result = CliRunner().invoke(
        app, [*args[:-1], str(again), "--preprocessing", str(out / PREPROCESS_FILE)]
    )
    assert result.exit_code == 0, result.output
    np.testing.assert_array_equal(
        load_party_dir(again).splits["train"].features, data.splits["train"].features
    )


def test_given_bad_prepare_csv_options_then_one_error_line_and_exit_2(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "t.csv", "id,a\nu1,1\nu1,2\n")
    base = ["prepare", "--data", str(path), "--out", str(tmp_path / "o")]
    cases = [
        ([*base, "--block", "0", "--clients", "2"], "needs --id-column"),
        ([*base, "--id-column", "id", "--clients", "2"], "needs --block"),
        ([*base, "--id-column", "id", "--block", "0"], "needs --clients"),
        ([*base, "--id-column", "id", "--block", "0", "--clients", "2"], "duplicate ID 'u1'"),
    ]
    for args, message in cases:
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2, result.output
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]


def test_given_table_party_when_checkpointed_then_fit_goes_with_weights_and_is_checked(
    tmp_path: Path,
) -> None:
    paths = write_tables(tmp_path, n=200)
    src = source(paths["bank"], id_column="customer_id", label_column=LABEL_COLUMN)
    data, fitted = load_table_party(src)
    assert fitted.classes == ("no", "yes") and data.meta.num_classes == 2
    config = TrainConfig(epochs=1, model=ModelConfig(embed_dim=4, hidden=(8,)))
    party = Party("party0", data, config, secret=b"s")
    path = save_party_checkpoint(tmp_path / "ckpt", party)
    state = load_checkpoint(path, None)["state"]
    assert state["preprocessing"] == fitted.model_dump(mode="json")
    party.load_state_dict(state)
    party.replace_split("test", None)  # evaluation variants keep the fit with the weights
    assert party.state_dict()["preprocessing"] == state["preprocessing"]
    other_src = src.model_copy(update={"features": ("yearly_income", "age_years")})
    other = Party("party0", load_table_party(other_src)[0], config, secret=b"s")
    with pytest.raises(ConfigError, match="another fitted preprocessing"):
        other.load_state_dict(state)


def test_given_kept_fit_when_the_party_restarts_then_it_is_reused_not_refitted(
    tmp_path: Path,
) -> None:
    path = write_csv(tmp_path / "t.csv", "id,a\nu1,1\nu2,3\n")
    keep = tmp_path / "ckpt" / "party0.preprocess.json"
    first = load_table_party_kept(source(path), keep)
    assert keep.is_file()
    write_csv(path, "id,a\nu1,1\nu2,3\nu3,100\n")  # a refit would move the mean
    second = load_table_party_kept(source(path), keep)
    assert second.preprocessing == first.preprocessing
    assert TabularPreprocessor.from_json(keep.read_text(), "k").columns[0].mean == 2.0


def test_given_three_tables_when_simulated_then_trains_and_predicts_partial_overlaps(
    tmp_path: Path,
) -> None:
    paths = write_tables(tmp_path, n=300)
    args = ["simulate", "--id-column", "customer_id", "--label-column", LABEL_COLUMN]
    for name in ("bank", "retail", "telecom"):
        args += ["--data", str(paths[name])]
    args += ["--epochs", "4", "--no-progress", "--out", str(tmp_path / "sim.json")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    saved = json.loads((tmp_path / "sim.json").read_text())
    losses = [epoch["mean_loss"] for epoch in saved["epochs"]]
    assert losses[-1] < 0.95 * losses[0], losses  # it learns from the tables
    rows = saved["results"][0]["rows"]
    for wrong, message in (
        (["--label-blocks", "1"], "retail.csv: no label column 'defaulted'"),
        (["--data", str(tmp_path)], "give party directories or CSV/Parquet tables, not both"),
    ):
        bad = CliRunner().invoke(app, [*args, *wrong])
        assert bad.exit_code == 2 and message in bad.output, bad.output
    observed = {r["observed"] for r in rows}
    assert {"0,1,2", "0,1", "0,2", "all"} <= observed
    assert all(r["samples"] > 0 for r in rows)


def test_given_ids_written_differently_when_simulated_then_refused_with_examples_of_both(
    tmp_path: Path,
) -> None:
    rng = np.random.default_rng(0)
    bank = "".join(f"C-{i:04d},{rng.normal():.3f},{'yes' if i % 3 else 'no'}\n" for i in range(60))
    shop = "".join(f"c{i},{rng.normal():.3f}\n" for i in range(60))
    paths = [write_csv(tmp_path / "bank.csv", "id,a,y\n" + bank)]
    paths += [write_csv(tmp_path / "shop.csv", "id,b\n" + shop)]
    args = ["simulate", "--id-column", "id", "--label-column", "y", "--epochs", "1"]
    args += ["--data", str(paths[0]), "--data", str(paths[1]), "--no-progress"]
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "sim.json")])
    assert result.exit_code == 2, result.output  # before training: no run, no results
    assert "share 0 sample IDs as written, but 60 once" in result.output
    assert "('C-0000' and 'c0', 'C-0001' and 'c1', 'C-0010' and 'c10')" in result.output
    assert "refused before training" in result.output
    assert not (tmp_path / "sim.json").exists()


def test_given_ids_that_match_nothing_when_simulated_then_refused_before_training(
    tmp_path: Path,
) -> None:
    rng = np.random.default_rng(0)
    bank = "".join(f"b{i},{rng.normal():.3f},{'yes' if i % 3 else 'no'}\n" for i in range(60))
    shop = "".join(f"s{i},{rng.normal():.3f}\n" for i in range(60))
    paths = [write_csv(tmp_path / "bank.csv", "id,a,y\n" + bank)]
    paths += [write_csv(tmp_path / "shop.csv", "id,b\n" + shop)]
    args = ["simulate", "--id-column", "id", "--label-column", "y", "--epochs", "1"]
    args += ["--data", str(paths[0]), "--data", str(paths[1]), "--no-progress"]
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "sim.json")])
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert UNMATCHED in said, said
    for block, party in ((0, "party0"), (1, "party1")):
        assert f"block {block} ({party}) shares none of its" in said, said
    assert "epoch" not in said.lower(), said  # refused before the first epoch


def test_given_ids_with_spaces_around_them_then_they_align_as_if_written_without(
    tmp_path: Path,
) -> None:
    bank = "".join(f"C{i:03d},{i % 7},{'yes' if i % 3 else 'no'}\n" for i in range(40))
    shop = "".join(f"  C{i:03d} ,{i % 5}\n" for i in range(40))  # padded by a spreadsheet
    paths = [write_csv(tmp_path / "bank.csv", "id,a,y\n" + bank)]
    paths += [write_csv(tmp_path / "shop.csv", "id,b\n" + shop)]
    sources = [
        TableSource(path=paths[0], id_column="id", label_column="y", block=0, num_blocks=2),
        TableSource(path=paths[1], id_column="id", block=1, num_blocks=2, num_classes=2),
    ]
    ids = [
        {str(i) for split in load_table_party(s)[0].splits.values() for i in split.ids}
        for s in sources
    ]
    assert ids[0] == ids[1] and "C007" in ids[1]


def test_given_bad_client_table_options_then_one_error_line_and_exit_2(tmp_path: Path) -> None:
    cli = typer.Typer()
    cli.command()(client)
    path = write_csv(tmp_path / "t.csv", "id,a\nu1,1\nu1,2\n")
    party_dir = tmp_path / "party0"
    party_dir.mkdir()
    base = ["--insecure", "--data"]
    cases = [
        ([*base, str(path), "--id-column", "id", "--block", "0"], "needs --clients"),
        ([*base, str(path), "--block", "0", "--clients", "2"], "needs --id-column"),
        ([*base, str(party_dir), "--id-column", "id"], "--id-column applies to a CSV/Parquet"),
        (
            [*base, str(path), "--id-column", "id", "--block", "0", "--clients", "2"],
            "t.csv: duplicate ID 'u1' at line 3",
        ),
    ]
    for args, message in cases:
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 2, result.output
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]


def test_given_a_table_when_its_row_ids_are_read_then_they_are_the_served_rows_order(
    tmp_path: Path,
) -> None:
    # label-only rows (a label, no feature cell) are served last: the IDs follow that order
    def row(i: int) -> str:
        a, b = ("", "") if i % 7 == 0 else (str(i % 5), "ab"[i % 2])
        return f"u{i},{a},{b},{'yes' if i % 3 else 'no'}\n"

    rows = "".join(row(i) for i in range(80))
    path = write_csv(tmp_path / "bank.csv", "id,a,b,y\n" + rows)
    source = TableSource(path=path, id_column="id", label_column="y", block=0, num_blocks=2)
    served, _ = load_table_party(source)
    ids = split_row_ids(source)
    assert set(ids) == set(served.splits) == {"train", "test"}
    for split, data in served.splits.items():
        assert ids[split] == [str(i) for i in data.ids]
    assert ids["train"][-1] in {f"u{i}" for i in range(0, 80, 7)}
