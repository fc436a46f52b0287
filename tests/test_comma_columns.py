"""A column whose name holds a comma can be named in --features, --ignore-columns and
--categorical: `\\,` is a comma inside a name, and the plain comma list works as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vfl_cli.app import app
from vfl_cli.table_options import feature_names, split_names


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("age,city", ["age", "city"]),
        ("age,rate\\,net", ["age", "rate,net"]),
        ("a\\\\,b", ["a\\", "b"]),  # \\ is a backslash, so the comma after it separates
        ("C:\\data", ["C:\\data"]),  # any other backslash is itself
        ("\\,", [","]),
    ],
)
def test_given_a_list_with_escaped_commas_then_split_at_the_others(
    text: str, names: list[str]
) -> None:
    assert split_names(text) == names


def test_given_a_config_list_then_each_item_is_one_name() -> None:
    assert feature_names(["rate,net", " age "]) == ("rate,net", "age")
    assert feature_names(" age , rate\\,net ") == ("age", "rate,net")


def write(path: Path) -> Path:
    rows = "".join(
        f"u{i},{i % 7},{i % 3},{(i * 5) % 11},{'yes' if i % 2 else 'no'}\n" for i in range(40)
    )
    path.write_text('id,"rate,net",b,c,y\n' + rows, encoding="utf-8")
    return path


def prepare(path: Path, out: Path, *extra: str) -> tuple[int, str]:
    args = ["prepare", "--data", str(path), "--id-column", "id", "--label-column", "y"]
    args += ["--block", "0", "--clients", "2", "--out", str(out), *extra]
    result = CliRunner().invoke(app, args)
    return result.exit_code, result.output


def test_given_prepare_with_an_escaped_comma_then_that_column_is_kept(tmp_path: Path) -> None:
    path = write(tmp_path / "t.csv")
    code, output = prepare(path, tmp_path / "p", "--features", "rate\\,net,b")
    assert code == 0, output
    assert "  rate,net: numeric" in output and "  b: numeric" in output and "  c:" not in output
    code, output = prepare(path, tmp_path / "q", "--ignore-columns", "rate\\,net")
    assert code == 0 and "  rate,net:" not in output and "  c: numeric" in output, output


def test_given_the_comma_unescaped_then_the_error_says_how_to_write_it(tmp_path: Path) -> None:
    path = write(tmp_path / "t.csv")
    code, output = prepare(path, tmp_path / "p", "--features", "rate,net,b")
    lines = output.strip().splitlines()
    assert code == 2 and len(lines) == 1, output
    assert (
        "no feature column 'rate', 'net' (--features; the file's columns: id, rate,net" in lines[0]
    )
    assert lines[0].endswith("; a comma inside a name is written \\, (rate\\,net)")


def test_given_simulate_with_an_escaped_comma_then_the_block_keeps_that_column(
    tmp_path: Path,
) -> None:
    label = write(tmp_path / "bank.csv")
    other = tmp_path / "shop.csv"
    other.write_text('id,"x,y",z\n' + "".join(f"u{i},{i % 4},{i % 9}\n" for i in range(40)))
    args = ["simulate", "--data", str(label), "--data", str(other), "--id-column", "id"]
    args += ["--label-column", "y", "--epochs", "1", "--no-progress"]
    args += ["--features", "1:x\\,y", "--out", str(tmp_path / "s.json")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    tables = json.loads((tmp_path / "s.json").read_text())["config"]["tables"]
    assert [t["features"] for t in tables] == [None, ["x,y"]]
