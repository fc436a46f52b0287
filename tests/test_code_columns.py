"""A numeric column that looks like codes (zip codes, product IDs written as digits) is warned
about by name when a party fits its preprocessing, with the option that makes it categorical;
real quantities (ages, amounts, years, counts) are not."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from vfl_cli.app import app
from vfl_core.data.code_columns import why_not_codes
from vfl_core.data.tabular import TableSource, load_table_party

RNG = np.random.default_rng(5)
ZIPS = np.sort(RNG.choice(np.arange(10000, 99999), 40, replace=False)).astype(float)


def codes(n: int = 300) -> np.ndarray:
    return RNG.choice(ZIPS, n)


@pytest.mark.parametrize(
    ("values", "why"),
    [
        (codes(), None),
        (np.where(RNG.random(300) < 0.2, np.nan, codes()), None),  # empty cells aside
        (codes(40), "fewer than 50 cells"),
        (RNG.integers(18, 90, 300).astype(float), "values below 1000"),  # ages
        (np.round(RNG.normal(0, 3000, 300)), "values below 1000"),  # bill amounts, negative too
        (RNG.choice([10000.0, 50000.0, 200000.0, 1000000.0], 300), "several widths"),  # limits
        (codes() + 0.5, "not whole numbers"),
        (RNG.choice(ZIPS[:6], 300), "fewer than 10 values"),
        (RNG.choice(np.arange(10000, 99999), 300).astype(float), "values seldom repeated"),
        (RNG.integers(1990, 2024, 300).astype(float), "values fill their range"),  # years
        (RNG.choice(np.arange(1000, 9999, 100), 300).astype(float), "round values"),  # prices
    ],
)
def test_given_a_column_then_only_codes_pass_every_test(values: np.ndarray, why: str) -> None:
    assert why_not_codes(values) == why


def write_shop(path: Path) -> Path:
    """3 columns: zip codes written `75001.0`, an age, an amount; labels at this party."""
    n = 200
    rows = [
        f"u{i},{z:.1f},{RNG.integers(18, 90)},{RNG.normal(50, 20):.2f},{'yes' if i % 3 else 'no'}"
        for i, z in enumerate(codes(n))
    ]
    path.write_text("id,zip,age,amount,y\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return path


def test_given_zip_codes_as_numbers_when_fitted_then_the_party_is_warned_by_name(
    tmp_path: Path,
) -> None:
    path = write_shop(tmp_path / "shop.csv")
    source = TableSource(path=path, id_column="id", label_column="y", block=1, num_blocks=2)
    data, fitted = load_table_party(source)
    assert data.warnings == (
        f"{path}: column 'zip' looks like codes written as numbers (whole numbers of one "
        "width, few values, each repeated, scattered over their range): it is fitted as a "
        "number, as if the order meant something; if it does not, give --categorical zip (vfl "
        "simulate: --categorical 1:zip)",
    )
    named, _ = load_table_party(source.model_copy(update={"categorical": ("zip",)}))
    assert named.warnings == ()
    reused, _ = load_table_party(source, fitted)  # said when fitted, not at every reuse
    assert reused.warnings == ()


def test_given_prepare_on_zip_codes_then_a_warning_line_names_the_option(tmp_path: Path) -> None:
    path = write_shop(tmp_path / "shop.csv")
    args = ["prepare", "--data", str(path), "--id-column", "id", "--label-column", "y"]
    args += ["--block", "0", "--clients", "2", "--out", str(tmp_path / "p")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    warned = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warned) == 1 and "column 'zip' looks like codes" in warned[0], result.stderr
    assert "give --categorical zip (" in warned[0]
    quiet = CliRunner().invoke(app, [*args, "--categorical", "zip"])
    assert quiet.exit_code == 0 and "warning:" not in quiet.stderr, quiet.stderr


def test_given_simulate_on_zip_codes_then_the_warning_names_the_block(tmp_path: Path) -> None:
    shop = write_shop(tmp_path / "shop.csv")
    bank = tmp_path / "bank.csv"
    bank.write_text("id,x\n" + "".join(f"u{i},{i % 7}\n" for i in range(200)), encoding="utf-8")
    args = ["simulate", "--data", str(bank), "--data", str(shop), "--id-column", "id"]
    args += ["--label-column", "y", "--epochs", "1", "--no-progress"]
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "s.json")])
    assert result.exit_code == 0, result.output
    warned = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warned) == 1 and "(vfl simulate: --categorical 1:zip)" in warned[0], warned
    assert json.loads((tmp_path / "s.json").read_text())["results"]


def test_given_a_client_on_zip_codes_then_its_log_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from vfl_client.runner import ClientConfig, _load_data

    path = write_shop(tmp_path / "shop.csv")
    source = TableSource(path=path, id_column="id", label_column="y", block=0, num_blocks=2)
    with caplog.at_level("WARNING", logger="vfl_client.runner"):
        _load_data(ClientConfig(data=path, table=source))
    assert "column 'zip' looks like codes" in caplog.text and "--categorical zip (" in caplog.text
