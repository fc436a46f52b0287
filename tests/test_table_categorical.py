"""A party says which of its columns are categorical (--categorical: codes written as numbers)
and which to leave out (--ignore-columns), in vfl-client, vfl prepare and vfl simulate."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import typer
from typer.testing import CliRunner

from vfl_cli import client_cmd
from vfl_cli.app import app
from vfl_core.data.party_dir import PREPROCESS_FILE, load_party_dir
from vfl_core.data.preprocess import TabularPreprocessor
from vfl_core.data.tabular import TableSource, load_table_party
from vfl_core.errors import ConfigError, DataError

ZIPS = ["75001", "69002", "75001", "13003", "69002", "75001.0"]


def write_shop(path: Path, zips: list[str] = ZIPS) -> Path:
    """Zip codes written as numbers, an amount, a column never filled in, and a label."""
    rows = [f"u{i},{z},{i * 1.5},,{'yes' if i % 2 else 'no'}" for i, z in enumerate(zips)]
    path.write_text("id,zip,amount,notes,y\n" + "\n".join(rows) + "\n")
    return path


def source(path: Path, **kw: Any) -> TableSource:
    base = {"id_column": "id", "block": 0, "num_blocks": 2, "test_fraction": 0.0}
    return TableSource(path=path, **{**base, "label_column": "y", **kw})


def kinds(fitted: TabularPreprocessor) -> dict[str, str]:
    return {c.name: c.kind for c in fitted.columns}


def test_given_categorical_zip_when_fitted_then_its_cells_as_written_are_one_hot(
    tmp_path: Path,
) -> None:
    path = write_shop(tmp_path / "shop.csv")
    with pytest.raises(DataError, match="column 'notes' has no values"):
        load_table_party(source(path))  # the all-empty column: only leaving it out helps
    plain, fitted = load_table_party(source(path, ignore_columns=("notes",)))
    assert kinds(fitted) == {"zip": "numeric", "amount": "numeric"}
    data, fitted = load_table_party(source(path, ignore_columns=("notes",), categorical=("zip",)))
    assert kinds(fitted) == {"zip": "onehot", "amount": "numeric"}
    zip_spec = fitted.columns[0]
    assert zip_spec.categories == ("13003", "69002", "75001", "75001.0")  # as written
    onehot = data.splits["train"].features[:, :5]  # the first column's one-hot, then unknown
    expected = [zip_spec.categories.index(z) for z in ZIPS]
    np.testing.assert_array_equal(onehot.argmax(axis=1), expected)
    np.testing.assert_array_equal(onehot.sum(axis=1), np.ones(len(ZIPS)))
    assert data.splits["train"].features.shape[1] == plain.splits["train"].features.shape[1] + 4


def test_given_categorical_with_few_max_onehot_then_embedded(tmp_path: Path) -> None:
    path = write_shop(tmp_path / "shop.csv")
    src = source(path, ignore_columns=("notes",), categorical=("zip",), max_onehot=2)
    data, fitted = load_table_party(src)
    assert kinds(fitted)["zip"] == "embedding" and fitted.cardinalities == (5,)
    codes = data.splits["train"].features[:, -1]
    np.testing.assert_array_equal(codes, [3, 2, 3, 1, 2, 4])  # 1.. the sorted categories


def test_given_parquet_integer_codes_when_categorical_then_their_decimal_text(
    tmp_path: Path,
) -> None:
    path = tmp_path / "shop.parquet"
    table = {"id": ["u0", "u1", "u2", "u3"], "zip": [75001, 69002, 75001, 13003]}
    pq.write_table(pa.table({**table, "y": ["no", "yes", "no", "yes"]}), path)
    _, fitted = load_table_party(source(path, categorical=("zip",)))
    assert kinds(fitted) == {"zip": "onehot"}
    assert fitted.columns[0].categories == ("13003", "69002", "75001")
    new = tmp_path / "new.parquet"
    pq.write_table(pa.table({"id": ["n0", "n1"], "zip": [69002, 99999], "y": ["no", "yes"]}), new)
    data, _ = load_table_party(source(new), fitted)
    np.testing.assert_array_equal(data.splits["train"].features, [[0, 1, 0, 0], [0, 0, 0, 1]])


def test_given_bad_column_names_when_loading_then_each_error_names_them(tmp_path: Path) -> None:
    path = write_shop(tmp_path / "shop.csv")
    columns = "the file's columns: id, zip, amount, notes, y"
    cases: list[tuple[dict[str, Any], type[Exception], str]] = [
        ({"categorical": ("zap", "zop")}, DataError, "no column 'zap', 'zop' (--categorical; "),
        ({"ignore_columns": ("nots",)}, DataError, "no column 'nots' (--ignore-columns; "),
        ({"categorical": ("y",)}, ConfigError, "--categorical: 'y' is the ID or label column"),
        ({"ignore_columns": ("id",)}, ConfigError, "--ignore-columns: 'id' is the ID or label"),
        (
            {"features": ("amount",), "ignore_columns": ("notes",)},
            ConfigError,
            "give --features (the columns to keep) or --ignore-columns, not both",
        ),
        (
            {"ignore_columns": ("notes", "zip"), "categorical": ("zip",)},
            ConfigError,
            "--categorical: 'zip' left out of the features",
        ),
    ]
    for options, error, message in cases:
        with pytest.raises(error) as caught:
            load_table_party(source(path, **options))
        assert message in str(caught.value)
        if error is DataError:
            assert columns in str(caught.value) and str(path) in str(caught.value)


def prepare(args: list[str]) -> str:
    result = CliRunner().invoke(app, ["prepare", "--id-column", "id", "--clients", "2", *args])
    assert result.exit_code == 0, result.output
    return result.output


def test_given_prepare_categorical_when_reused_on_new_rows_then_the_zip_stays_categorical(
    tmp_path: Path,
) -> None:
    path = write_shop(tmp_path / "shop.csv")
    out = tmp_path / "party"
    args = ["--data", str(path), "--block", "0", "--label-column", "y", "--test-fraction", "0"]
    output = prepare(
        [*args, "--ignore-columns", "notes", "--categorical", "zip", "--out", str(out)]
    )
    assert "zip: onehot (4 categories)" in output
    fitted = TabularPreprocessor.model_validate_json((out / PREPROCESS_FILE).read_text())
    new = tmp_path / "new.csv"
    new.write_text("id,zip,amount,y\nn0,69002,3,no\nn1,75001.0,4,yes\nn2,12345,5,no\n")
    reused = tmp_path / "reused"
    args = ["--data", str(new), "--block", "0", "--test-fraction", "0", "--out", str(reused)]
    output = prepare([*args, "--preprocessing", str(out / PREPROCESS_FILE)])
    assert "zip: onehot (4 categories)" in output
    again = TabularPreprocessor.model_validate_json((reused / PREPROCESS_FILE).read_text())
    assert again.columns == fitted.columns
    features = load_party_dir(reused).splits["train"].features
    onehot = features[:, :5]  # 13003 69002 75001 75001.0, unknown
    np.testing.assert_array_equal(onehot.argmax(axis=1), [1, 3, 4])
    fitted_file = ["--preprocessing", str(out / PREPROCESS_FILE), "--out", str(tmp_path / "x")]
    for extra, message in [
        (["--categorical", "zip"], None),  # as fitted: a restarted party repeats its options
        (["--categorical", "amount"], "--categorical: 'amount' is not a categorical column of"),
        (["--ignore-columns", "zip"], "--ignore-columns: 'zip' is a column of the fitted"),
    ]:
        result = CliRunner().invoke(
            app, ["prepare", "--id-column", "id", "--clients", "2", *args, *fitted_file, *extra]
        )
        if message is None:
            assert result.exit_code == 0, result.output
        else:
            assert result.exit_code == 2 and message in result.output, result.output


def test_given_an_unknown_categorical_when_prepared_then_one_error_line(tmp_path: Path) -> None:
    path = write_shop(tmp_path / "shop.csv")
    args = ["prepare", "--id-column", "id", "--clients", "2", "--block", "0", "--data", str(path)]
    cases = [
        (["--categorical", "zap"], "no column 'zap' (--categorical; the file's columns: id, zip"),
        (["--features", "zip", "--ignore-columns", "notes"], "or --ignore-columns, not both"),
    ]
    for extra, message in cases:
        result = CliRunner().invoke(app, [*args, *extra, "--out", str(tmp_path / "o")])
        lines = result.output.strip().splitlines()
        assert result.exit_code == 2 and len(lines) == 1, result.output
        assert lines[0].startswith("error: ") and message in lines[0]


def write_two(tmp_path: Path) -> list[Path]:
    rng = np.random.default_rng(0)
    zips = rng.choice([75001, 69002, 13003], 80)
    bank = "".join(
        f"c{i},{rng.normal():.3f},,{'yes' if z == 75001 else 'no'}\n" for i, z in enumerate(zips)
    )
    shop = "".join(f"c{i},{z}\n" for i, z in enumerate(zips))
    paths = [tmp_path / "bank.csv", tmp_path / "shop.csv"]
    paths[0].write_text("id,a,notes,y\n" + bank)
    paths[1].write_text("id,zip\n" + shop)
    return paths


def test_given_simulate_categorical_when_run_then_that_party_fits_the_zip_as_categories(
    tmp_path: Path,
) -> None:
    paths = write_two(tmp_path)
    args = ["simulate", "--id-column", "id", "--label-column", "y", "--epochs", "2"]
    args += ["--data", str(paths[0]), "--data", str(paths[1]), "--no-progress"]
    args += ["--out", str(tmp_path / "sim.json"), "--ignore-columns", "0:notes"]
    result = CliRunner().invoke(app, [*args, "--categorical", "1:zip"])
    assert result.exit_code == 0, result.output
    tables = json.loads((tmp_path / "sim.json").read_text())["config"]["tables"]
    assert [t["categorical"] for t in tables] == [[], ["zip"]]
    assert [t["ignore_columns"] for t in tables] == [["notes"], []]
    result = CliRunner().invoke(app, [*args, "--categorical", "0:zip"])
    assert result.exit_code == 2
    assert "bank.csv: no column 'zip' (--categorical; the file's columns" in result.output
    result = CliRunner().invoke(app, [*args, "--categorical", "zip"])
    assert result.exit_code == 2 and "--categorical 'zip': give BLOCK:COLUMNS" in result.output


def test_given_client_table_options_when_parsed_then_they_reach_the_table_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[Any] = []
    monkeypatch.setattr(client_cmd, "run_client", lambda cfg: seen.append(cfg) or "done")
    command = typer.Typer()
    command.command()(client_cmd.client)
    path = write_shop(tmp_path / "shop.csv")
    args = ["--data", str(path), "--block", "0", "--clients", "2", "--id-column", "id"]
    args += ["--categorical", "zip, amount", "--ignore-columns", "notes"]
    result = CliRunner().invoke(command, args)
    assert result.exit_code == 0, result.output
    (cfg,) = seen
    assert cfg.table.categorical == ("zip", "amount") and cfg.table.ignore_columns == ("notes",)
    result = CliRunner().invoke(command, [*args, "--features", "zip"])
    assert result.exit_code == 2 and "or --ignore-columns, not both" in result.output
