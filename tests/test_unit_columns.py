"""Numbers written with a currency sign or '%' (a spreadsheet's formatted cells) are text to the
reader, so categories: fitting says so by name (stop-40 QA pass, benchmarks/results/table_qa.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from vfl_cli.app import app
from vfl_core.data.tabular import TableSource, load_table_party
from vfl_core.data.unit_columns import unit


@pytest.mark.parametrize(
    ("cell", "sign"),
    [
        ("45%", "%"),
        ("45.3 %", "%"),
        ("$1,200", "$"),
        ("€3.40", "€"),
        ("-$12.00", "$"),
        ("(1,200) $", "$"),
        ("12.50 EUR", "EUR"),
        ("1,234.50", None),
        ("north", None),
        ("€", None),
        ("5 stars", None),
        ("2024-03-01", None),
    ],
)
def test_given_a_cell_then_only_a_number_with_a_unit_has_one(cell: str, sign: str | None) -> None:
    assert unit(cell) == sign


def write_bank(path: Path, n: int = 60) -> Path:
    """An amount written `$1,234`, a rate written `12.5%`, tiers `10%`/`20%` and a plain number."""
    rows = [
        f'c{i},"${1000 + 37 * i:,}",{(i * 7) % 50 / 2}%,{10 * (1 + i % 2)}%,{i % 9},'
        + ("yes" if i % 3 else "no")
        for i in range(n)
    ]
    text = "id,amount,rate,tier,visits,y\n" + "\n".join(rows) + "\n"
    path.write_text(text, encoding="utf-8")
    return path


def test_given_amounts_and_rates_with_units_then_fitting_warns_by_name(tmp_path: Path) -> None:
    path = write_bank(tmp_path / "bank.csv")
    source = TableSource(
        path=path, id_column="id", label_column="y", block=1, num_blocks=2, test_fraction=0.0
    )
    data, fitted = load_table_party(source)
    kinds = {spec.name: spec.kind for spec in fitted.columns}
    assert kinds["amount"] == "embedding" and kinds["rate"] == "embedding"  # read as text
    (warning,) = data.warnings
    assert warning.startswith(f"{path}: columns 'amount' (60 categories, e.g. '$2,110'), ")
    assert "'rate' (50 categories, e.g. '2.5%') hold numbers written with a currency sign" in (
        warning
    )
    assert "'tier'" not in warning and "'visits'" not in warning  # 2 values; a plain number
    assert warning.endswith("--categorical amount,rate (vfl simulate: --categorical 1:amount,rate)")
    named, _ = load_table_party(source.model_copy(update={"categorical": ("amount", "rate")}))
    assert named.warnings == ()
    reused, _ = load_table_party(source, fitted)  # said when fitted, not at every reuse
    assert reused.warnings == ()


def test_given_simulate_on_percentages_then_a_warning_line_names_the_block(tmp_path: Path) -> None:
    bank = write_bank(tmp_path / "bank.csv")
    shop = tmp_path / "shop.csv"
    shop.write_text("id,x\n" + "".join(f"c{i},{i % 7}\n" for i in range(60)), encoding="utf-8")
    args = ["simulate", "--data", str(shop), "--data", str(bank), "--id-column", "id"]
    args += ["--label-column", "y", "--epochs", "1", "--no-progress"]
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "s.json")])
    assert result.exit_code == 0, result.output
    warned = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warned) == 1, result.stderr
    assert "(vfl simulate: --categorical 1:amount,rate)" in warned[0]
