"""Regression on tabular parties: real-valued labels read from a party's own CSV/Parquet table."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import typer
from tabular_tables import HOUSE_ID as ID
from tabular_tables import PRICE as TARGET
from tabular_tables import write_linear_tables
from typer.testing import CliRunner

from vfl_cli.app import app
from vfl_cli.client_cmd import client
from vfl_coordinator.registry import Registry
from vfl_core.data.party_dir import PREPROCESS_FILE, load_party_dir
from vfl_core.data.preprocess import Table, TabularPreprocessor, parse_labels
from vfl_core.data.table_files import read_table
from vfl_core.data.tabular import (
    TableSource,
    federation_sources,
    load_table_federation,
    load_table_party,
    load_table_party_kept,
)
from vfl_core.errors import ConfigError, DataError
from vfl_core.protocol import PartyInfo


def write_csv(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def source(path: Path, **kw: object) -> TableSource:
    base = {"id_column": "id", "block": 0, "num_blocks": 2, "test_fraction": 0.0}
    return TableSource(path=path, **{**base, **kw})  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ parse_labels


def test_given_regression_when_parsing_labels_then_float32_targets_and_no_classes(
    tmp_path: Path,
) -> None:
    path = write_csv(tmp_path / "t.csv", "id,y\nu1,1.5\nu2,-3e2\nu3,7\nu4, 0.25 \n")
    labels = parse_labels(read_table(path), "y", task="regression")
    assert labels.values.dtype == np.float32 and labels.classes == ()
    np.testing.assert_array_equal(labels.values, np.array([1.5, -300.0, 7.0, 0.25], np.float32))
    # the same column as classification is four classes: the task decides the parse
    assert parse_labels(read_table(path), "y").classes == ("-3e2", "0.25", "1.5", "7")


@pytest.mark.parametrize(
    ("cell", "message"),
    [
        ("cheap", "t.csv: line 3, column 'y': 'cheap' is not a finite number"),
        ("inf", "t.csv: line 3, column 'y': 'inf' is not a finite number"),
        ("1e39", "t.csv: line 3, column 'y': '1e39' is not a finite number"),  # float32 overflow
        ("", "t.csv: line 3, column 'y': no label"),
        ("NA", "t.csv: line 3, column 'y': no label"),
    ],
)
def test_given_a_bad_regression_label_when_parsing_then_error_names_file_line_column(
    tmp_path: Path, cell: str, message: str
) -> None:
    path = write_csv(tmp_path / "t.csv", f"id,y\nu1,1\nu2,{cell}\nu3,2\n")
    with pytest.raises(DataError) as err:
        parse_labels(read_table(path), "y", task="regression")
    assert str(err.value).startswith(str(tmp_path)) and message in str(err.value)


@pytest.mark.parametrize("task", ["regression", "classification"])
def test_given_an_empty_table_when_parsing_labels_then_error_names_file_and_column(
    tmp_path: Path, task: str
) -> None:
    # an empty file is refused by the reader; a table left without rows by parse_labels
    with pytest.raises(DataError, match=r"t\.csv: no data rows after the header"):
        read_table(write_csv(tmp_path / "t.csv", "id,y\n"))
    with pytest.raises(DataError, match="empty file"):
        read_table(write_csv(tmp_path / "e.csv", ""))
    empty = Table("t.csv", {"id": [], "y": []}, [])
    with pytest.raises(DataError, match=r"t\.csv: no rows, so no labels in column 'y'"):
        parse_labels(empty, "y", task=task)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ parties


def test_given_regression_tables_when_loaded_then_meta_task_one_output_float_targets(
    tmp_path: Path,
) -> None:
    label = write_csv(tmp_path / "a.csv", "id,x,y\nu1,1,10.5\nu2,2,20\nu3,3,31\n")
    data, fitted = load_table_party(source(label, label_column="y", task="regression"))
    assert (data.meta.task, data.meta.num_classes, data.meta.has_labels) == ("regression", 1, True)
    assert data.splits["train"].labels.dtype == np.float32  # type: ignore[union-attr]
    assert fitted.task == "regression" and fitted.classes == () and fitted.label_column == "y"
    # a feature-only party of a regression federation needs no class count
    features = write_csv(tmp_path / "b.csv", "id,z\nu1,a\nu2,b\n")
    other, _ = load_table_party(source(features, block=1, task="regression"))
    assert (other.meta.task, other.meta.num_classes, other.meta.has_labels) == (
        "regression",
        1,
        False,
    )
    with pytest.raises(ConfigError, match="--num-classes 3 is for classification"):
        load_table_party(source(features, block=1, task="regression", num_classes=3))


def test_given_regression_fit_when_reused_for_classification_then_refused(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "a.csv", "id,x,y\nu1,1,0\nu2,2,1\nu3,3,1\n")
    keep = tmp_path / "ckpt" / "party0.preprocess.json"
    load_table_party_kept(source(path, label_column="y", task="regression"), keep)
    assert TabularPreprocessor.from_json(keep.read_text(), "k").task == "regression"
    with pytest.raises(ConfigError, match="fitted for a regression task, not classification"):
        load_table_party_kept(source(path, label_column="y"), keep)
    fitted = TabularPreprocessor.from_json(keep.read_text(), "k")
    with pytest.raises(ConfigError, match="for a regression task, not classification"):
        load_table_party(source(path, label_column="y"), fitted)
    # a preprocess.json written before tasks existed has no task: it was classification
    old = fitted.model_dump(mode="json")
    del old["task"]
    assert TabularPreprocessor.model_validate(old).task == "classification"


def test_given_regression_federation_when_loaded_then_feature_parties_take_no_class_count(
    tmp_path: Path,
) -> None:
    paths = write_linear_tables(tmp_path, n=60)
    sources = federation_sources(
        [paths["owner"], paths["agent"]],
        None,
        id_column=ID,
        label_column=TARGET,
        label_blocks=None,
        task="regression",
    )
    parties = load_table_federation(sources)
    assert [(p.meta.task, p.meta.num_classes, p.meta.has_labels) for p in parties] == [
        ("regression", 1, True),
        ("regression", 1, False),
    ]


def test_given_a_feature_party_without_task_when_registering_then_told_to_declare_it() -> None:
    registry = Registry(2)
    registry.register(
        PartyInfo("bank", 0, 2, "tabular", (3,), 1, True, task="regression"), "127.0.0.1:1"
    )
    with pytest.raises(ConfigError) as err:
        registry.register(PartyInfo("shop", 1, 2, "tabular", (4,), 2, False), "127.0.0.1:2")
    assert "has task='classification' but party bank has 'regression'" in str(err.value)
    assert "feature-only ones too: a CSV/Parquet party with --task" in str(err.value)


# ------------------------------------------------------------------------------ the CLIs


def test_given_two_csv_halves_when_simulating_regression_then_rmse_beats_the_training_mean(
    tmp_path: Path,
) -> None:
    paths = write_linear_tables(tmp_path)
    args = ["simulate", "--data", str(paths["owner"]), "--data", str(paths["agent"])]
    args += ["--id-column", ID, "--label-column", TARGET, "--task", "regression"]
    args += ["--epochs", "15", "--batch-size", "32", "--lr", "3e-3", "--hidden", "32"]
    args += ["--no-progress", "--out", str(tmp_path / "sim.json")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    # the agent alone holds no labels: nothing to score without the owner
    assert "without party 0: nothing scored" in result.output  # no label party left
    assert "without party 1: RMSE " in result.output
    saved = json.loads((tmp_path / "sim.json").read_text())
    overall = saved["results"][0]["rows"][-1]
    assert overall["observed"] == "all" and overall["samples"] > 50
    # predicting the label party's training mean for every test row
    owner_source = TableSource(
        path=paths["owner"], id_column=ID, label_column=TARGET, block=0, num_blocks=2
    )
    owner, _ = load_table_party(owner_source.model_copy(update={"task": "regression"}))
    train, test = owner.splits["train"].labels, owner.splits["test"].labels
    assert train is not None and test is not None and len(test) == overall["samples"]
    baseline = float(np.sqrt(np.mean((test - train.mean()) ** 2)))
    assert overall["rmse"] < 0.5 * baseline, (overall, baseline)
    assert overall["federation_rmse"] < 0.5 * baseline
    bad = CliRunner().invoke(app, [*args[:-2], "--task", "ranking"])
    assert bad.exit_code == 2 and "--task: unknown task 'ranking'" in bad.output, bad.output


def test_given_regression_prepare_csv_then_directory_and_its_fit_refused_for_classification(
    tmp_path: Path,
) -> None:
    paths = write_linear_tables(tmp_path, n=50)
    out = tmp_path / "owner"
    base = ["prepare", "--data", str(paths["owner"]), "--id-column", ID, "--block", "0"]
    base += ["--clients", "2", "--label-column", TARGET]
    result = CliRunner().invoke(app, [*base, "--task", "regression", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert f"regression targets from '{TARGET}'" in result.output
    data = load_party_dir(out)  # the directory loads with its own task checks
    assert (data.meta.task, data.meta.num_classes) == ("regression", 1)
    fit = out / PREPROCESS_FILE
    cases = [
        ([*base, "--out", str(tmp_path / "o"), "--preprocessing", str(fit)], "fitted for a regr"),
        (["prepare", "--task", "regression", "--out", str(tmp_path / "o")], "applies to --data"),
        (["predict", "--label-names", str(fit), "--insecure"], "--label-names is for classif"),
    ]
    for args, message in cases:
        bad = CliRunner().invoke(app, args)
        lines = bad.output.strip().splitlines()
        assert bad.exit_code == 2 and len(lines) == 1, bad.output
        assert lines[0].startswith("error: ") and message in lines[0], bad.output


def test_given_client_options_when_task_is_wrong_or_misplaced_then_one_error_line(
    tmp_path: Path,
) -> None:
    cli = typer.Typer()
    cli.command()(client)
    label = write_csv(tmp_path / "t.csv", "id,a,y\nu1,1,2.5\nu2,2,oops\n")
    party_dir = tmp_path / "party0"
    party_dir.mkdir()
    table = ["--insecure", "--data", str(label), "--id-column", "id", "--block", "0"]
    table += ["--clients", "2", "--test-fraction", "0"]
    cases = [
        ([*table, "--label-column", "y", "--task", "regression"], "line 3, column 'y': 'oops'"),
        ([*table, "--task", "regression", "--num-classes", "2"], "--num-classes 2 is for class"),
        ([*table, "--task", "multi"], "--task: unknown task 'multi'"),
        (["--insecure", "--data", str(party_dir), "--task", "regression"], "--task applies to"),
    ]
    for args, message in cases:
        result = CliRunner().invoke(cli, args)
        lines = result.output.strip().splitlines()
        assert result.exit_code == 2 and len(lines) == 1, result.output
        assert lines[0].startswith("error: ") and message in lines[0], result.output
