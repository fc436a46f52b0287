"""`vfl simulate --features BLOCK:COLUMNS`: a party's table used without the columns it should
not train on (a free-text or an empty column), as vfl-client's --features does."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from vfl_cli.app import app


def write_tables(tmp_path: Path, rows: int = 60) -> list[Path]:
    """A label party whose table has a column never filled in, and a feature-only party."""
    rng = np.random.default_rng(0)
    bank = "".join(f"c{i},{rng.normal():.3f},,{'yes' if i % 3 else 'no'}\n" for i in range(rows))
    shop = "".join(f"c{i},{rng.normal():.3f}\n" for i in range(rows))
    paths = [tmp_path / "bank.csv", tmp_path / "shop.csv"]
    paths[0].write_text("id,a,notes,y\n" + bank)
    paths[1].write_text("id,b\n" + shop)
    return paths


def simulate(tmp_path: Path, *extra: str) -> tuple[int, str]:
    paths = write_tables(tmp_path)
    args = ["simulate", "--id-column", "id", "--label-column", "y", "--epochs", "1"]
    args += ["--data", str(paths[0]), "--data", str(paths[1]), "--no-progress"]
    args += ["--out", str(tmp_path / "sim.json"), *extra]
    result = CliRunner().invoke(app, args)
    return result.exit_code, result.output


def test_given_an_empty_column_when_simulated_then_the_error_names_simulates_features(
    tmp_path: Path,
) -> None:
    code, output = simulate(tmp_path)
    lines = output.strip().splitlines()
    assert code == 2 and len(lines) == 1, output
    assert "bank.csv: column 'notes' has no values" in lines[0]
    assert "vfl simulate --features BLOCK:COLUMNS" in lines[0]


def test_given_features_of_one_block_when_simulated_then_only_that_table_is_narrowed(
    tmp_path: Path,
) -> None:
    code, output = simulate(tmp_path, "--features", "0: a")
    assert code == 0, output
    tables = json.loads((tmp_path / "sim.json").read_text())["config"]["tables"]
    assert [t["features"] for t in tables] == [["a"], None]


def test_given_bad_features_when_simulated_then_one_error_line_naming_it(tmp_path: Path) -> None:
    cases = [
        (["--features", "a"], "--features 'a': give BLOCK:COLUMNS, e.g. 1:age,city"),
        (["--features", "2:a"], "--features '2:a': block 2 out of range (2 --data tables: 0..1)"),
        (["--features", "0:"], "--features '0:': no column names given"),
        (["--features", "0:a", "--features", "0:a"], "--features: block 0 is given twice"),
        (["--features", "0:a", "--features", "1:zzz"], "shop.csv: no feature column 'zzz'"),
        (["--features", "0:a,y"], "--features: 'y' is the ID or label column"),
    ]
    for extra, message in cases:
        code, output = simulate(tmp_path, *extra)
        lines = output.strip().splitlines()
        assert code == 2 and len(lines) == 1, output
        assert lines[0].startswith("error: ") and message in lines[0], output


def test_given_features_without_tables_when_simulated_then_refused() -> None:
    result = CliRunner().invoke(app, ["simulate", "--features", "0:a", "--epochs", "1"])
    assert result.exit_code == 2
    assert "--features applies to --data tables" in result.output
