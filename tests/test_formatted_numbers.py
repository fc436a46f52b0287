"""Numbers as a spreadsheet formats them (a currency sign, '%', parentheses for negatives, digit
groups alone) are text to the reader, so categories: fitting says so by name."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from vfl_cli.app import app
from vfl_core.data.formatted_numbers import (
    DECIMAL_COMMA,
    GROUPS,
    PARENTHESES,
    UNIT,
    number_format,
)
from vfl_core.data.tabular import TableSource, load_table_party

U, P, G, C = UNIT, PARENTHESES, GROUPS, DECIMAL_COMMA


@pytest.mark.parametrize(
    ("cell", "ways"),
    [
        ("45%", (U,)),
        ("45.3 %", (U,)),
        ("$1,200", (U, G)),
        ("€3.40", (U,)),
        ("-$12.00", (U,)),
        ("(1,200.50) $", (U, P, G)),
        ("(0.53)", (P,)),
        ("12.50 EUR", (U,)),
        ("34,441", (G,)),
        ("1.234.567", (G,)),
        ("3,25", (C,)),
        ("1.5", ()),
        ("north", None),
        ("€", None),
        ("(12", None),
        ("5 stars", None),
        ("1.2.3", None),
        ("2024-03-01", None),
    ],
)
def test_given_a_cell_then_the_ways_it_formats_a_number(cell: str, ways: tuple[str, ...]) -> None:
    assert number_format(cell) == ways


def write_bank(path: Path, n: int = 60) -> Path:
    """An amount written `$1,234`, a rate `12.5%`, tiers `10%`/`20%`, a plain number, a balance
    with negatives in parentheses `(3.50)` and an income with digit groups alone `20,311`."""
    rows = [
        f'c{i},"${1000 + 37 * i:,}",{(i * 7) % 50 / 2}%,{10 * (1 + i % 2)}%,{i % 9},'
        + (f"({i / 2:.2f})" if i % 2 else f"{i / 4:.2f}")
        + f',"{20000 + 311 * i:,}",'
        + ("yes" if i % 3 else "no")
        for i in range(n)
    ]
    text = "id,amount,rate,tier,visits,balance,income,y\n" + "\n".join(rows) + "\n"
    path.write_text(text, encoding="utf-8")
    return path


def test_given_formatted_numbers_then_fitting_warns_by_name(tmp_path: Path) -> None:
    path = write_bank(tmp_path / "bank.csv")
    source = TableSource(
        path=path, id_column="id", label_column="y", block=1, num_blocks=2, test_fraction=0.0
    )
    data, fitted = load_table_party(source)
    kinds = {spec.name: spec.kind for spec in fitted.columns}
    assert {kinds[c] for c in ("amount", "rate", "balance", "income")} == {"embedding"}  # text
    (warning,) = data.warnings
    assert warning.startswith(
        f"{path}: column 'amount' (60 categories, e.g. '$2,110') holds numbers written with "
        "a currency sign or '%' and digit groups alone; column 'rate' (50 categories, e.g. "
        "'2.5%') holds numbers written with a currency sign or '%'; column 'balance' (60 "
        "categories, e.g. '(22.50)') holds numbers written with parentheses for negatives; "
        "column 'income' (60 categories, e.g. '29,330') holds numbers written with digit "
        "groups alone: read as text, each distinct number is a category of its own"
    )
    assert "'tier'" not in warning and "'visits'" not in warning  # 2 values; a plain number
    option = "amount,rate,balance,income"
    assert warning.endswith(f"--categorical {option} (vfl simulate: --categorical 1:{option})")
    named, _ = load_table_party(source.model_copy(update={"categorical": tuple(option.split(","))}))
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
    assert "(vfl simulate: --categorical 1:amount,rate,balance,income)" in warned[0]
