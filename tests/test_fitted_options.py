"""A party's table options given with a saved fitted preprocessing (vfl prepare --preprocessing,
a restarted vfl-client's kept fit) must agree with it: the fit decides, and an option it would
silently override is refused naming what differs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from vfl_cli.app import app
from vfl_core.data.fitted_options import check_against_fit
from vfl_core.data.preprocess import TabularPreprocessor
from vfl_core.data.tabular import TableSource, load_table_party
from vfl_core.errors import ConfigError


def write_table(path: Path) -> Path:
    rows = "".join(f"u{i},{i},{i % 3},{i * 7 % 11},{i % 2}\n" for i in range(40))
    path.write_text("id,a,b,c,y\n" + rows, encoding="utf-8")
    return path


def source(path: Path, **kw: Any) -> TableSource:
    base = {"id_column": "id", "label_column": "y", "block": 0, "num_blocks": 2}
    return TableSource(path=path, **{**base, **kw})


def fitted_on(path: Path, features: tuple[str, ...]) -> TabularPreprocessor:
    return load_table_party(source(path, features=features))[1]


def test_given_features_with_a_fit_when_the_same_columns_then_accepted_in_any_order(
    tmp_path: Path,
) -> None:
    path = write_table(tmp_path / "t.csv")
    fitted = fitted_on(path, ("a", "b"))
    for features in (("a", "b"), ("b", "a")):
        _, reused = load_table_party(source(path, features=features), fitted)
        assert [c.name for c in reused.columns] == ["a", "b"]  # the fit's order


@pytest.mark.parametrize(
    ("features", "said"),
    [
        (("a", "c"), "'c' only in --features; 'b' only in the fitted preprocessing"),
        (("a",), ": 'b' only in the fitted preprocessing ("),
        (("a", "b", "c"), ": 'c' only in --features ("),
    ],
)
def test_given_features_with_a_fit_when_the_columns_differ_then_refused_naming_each_side(
    tmp_path: Path, features: tuple[str, ...], said: str
) -> None:
    path = write_table(tmp_path / "t.csv")
    fitted = fitted_on(path, ("a", "b"))
    with pytest.raises(ConfigError) as caught:
        load_table_party(source(path, features=features), fitted)
    message = str(caught.value)
    assert message.startswith("--features differs from the fitted preprocessing's columns")
    assert said in message and "\n" not in message


def test_given_every_option_as_when_fitted_then_the_one_check_passes(tmp_path: Path) -> None:
    """A restarted party repeats its options: none of them is refused."""
    path = write_table(tmp_path / "t.csv")
    options: dict[str, Any] = {"features": ("a", "b"), "categorical": ("b",)}
    _, fitted = load_table_party(source(path, positive_class="0", **options))
    assert fitted.classes == ("1", "0")
    check_against_fit(source(path, positive_class="0", **options), fitted)
    check_against_fit(source(path, label_column=None), fitted)  # the fit's label is read


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"task": "regression"}, "the fitted preprocessing is for a classification task, not"),
        ({"label_column": "c"}, "--label-column 'c': the fitted preprocessing has the label "),
        ({"positive_class": "0"}, "--positive-class '0': the fitted preprocessing's classes are"),
        ({"features": ("a",)}, "--features differs from the fitted preprocessing's columns"),
        ({"categorical": ("a",)}, "--categorical: 'a' is not a categorical column of the fitted"),
        ({"ignore_columns": ("c",)}, "--ignore-columns: 'c' is a column of the fitted"),
    ],
)
def test_given_an_option_the_fit_fixes_otherwise_then_refused_by_name(
    tmp_path: Path, options: dict[str, Any], said: str
) -> None:
    path = write_table(tmp_path / "t.csv")
    _, fitted = load_table_party(source(path))
    with pytest.raises(ConfigError) as caught:
        check_against_fit(source(path, **options), fitted)
    assert str(caught.value).startswith(said) and "\n" not in str(caught.value)


def test_given_a_label_column_with_a_feature_only_fit_then_refused(tmp_path: Path) -> None:
    path = write_table(tmp_path / "t.csv")
    _, fitted = load_table_party(source(path, label_column=None, num_classes=2, block=1))
    with pytest.raises(ConfigError, match="--label-column 'y': the fitted preprocessing has no"):
        load_table_party(source(path), fitted)


def test_given_prepare_with_preprocessing_and_other_features_then_one_error_line(
    tmp_path: Path,
) -> None:
    path = write_table(tmp_path / "t.csv")
    args = ["prepare", "--data", str(path), "--id-column", "id", "--block", "0", "--clients", "2"]
    first = CliRunner().invoke(app, [*args, "--features", "a,b", "--out", str(tmp_path / "p0")])
    assert first.exit_code == 0, first.output
    reuse = [*args, "--preprocessing", str(tmp_path / "p0" / "preprocess.json")]
    same = CliRunner().invoke(app, [*reuse, "--features", "b,a", "--out", str(tmp_path / "p1")])
    assert same.exit_code == 0, same.output
    other = CliRunner().invoke(app, [*reuse, "--features", "a,c", "--out", str(tmp_path / "p2")])
    lines = other.output.strip().splitlines()
    assert other.exit_code == 2 and len(lines) == 1, other.output
    assert lines[0].startswith("error: --features differs") and "'c' only in --features" in lines[0]


def test_given_restarted_client_with_other_features_then_it_exits_2_naming_the_columns(
    tmp_path: Path,
) -> None:
    """A real vfl-client process: its kept fit (the checkpoint directory's) and --features that
    differ from it; the check comes before the client contacts anyone."""
    path = write_table(tmp_path / "t.csv")
    keep = tmp_path / "ckpt" / "party0.preprocess.json"
    keep.parent.mkdir()
    keep.write_text(fitted_on(path, ("a", "b")).to_json())
    command = [sys.executable, "-m", "vfl_cli.client_cmd", "--data", str(path)]
    command += ["--id-column", "id", "--label-column", "y", "--block", "0", "--clients", "2"]
    command += ["--features", "a,c", "--checkpoint-dir", str(tmp_path / "ckpt")]
    command += ["--coordinator", "127.0.0.1:1", "--insecure"]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=120, env=os.environ.copy(), check=False
    )
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: --features differs from the fitted preprocessing's columns: 'c' only in "
        "--features; 'b' only in the fitted preprocessing (it decides the columns; fit again "
        "to change them)"
    ], done.stderr
    assert "Traceback" not in done.stderr
