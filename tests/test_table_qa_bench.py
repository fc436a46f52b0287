"""Spreadsheet exports that should read as the clean file does: the same IDs, the same features.

One generated bank table in three parties (results: benchmarks/results/table_qa.md), rewritten
the ways a bank's or retailer's spreadsheet exports it; each export of a party must read as the
clean file of that party does."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import pytest

from benchmarks.tabular.tables import Table, write_parties
from vfl_core.data.learning_task import CLASSIFICATION
from vfl_core.data.tabular import TableSource, load_table_party

BLOCKS = (
    ("income", "rate", "member"),
    ("spend", "visits", "opened", "region"),
    ("score", "share", "channel"),
)
Rows = list[list[str]]
Written = tuple[list[str], Rows, dict[str, object]]


def bank(seed: int, n: int) -> Table:
    """Income, a rate, membership, spend, visits, an opening date (days since 1970; the exports
    write it as a date), a region, a score, a share and a channel; the label depends on each."""
    rng = np.random.default_rng([seed, 40])
    income = np.round(np.exp(rng.normal(10.5, 0.6, n)), 2)
    rate = np.round(rng.uniform(0, 60, n), 1)
    member = rng.random(n) < 0.4
    spend = np.round(np.exp(rng.normal(7, 1, n)), 2)
    visits = rng.poisson(4, n).astype(float)
    days = rng.integers(0, 1500, n)
    region = rng.choice(["north", "south", "east", "west", "centre"], n)
    score = rng.normal(0, 1, n)
    share = np.round(rng.uniform(0, 100, n), 0)
    channel = rng.choice(["web", "app", "branch"], n)
    z = 0.9 * (np.log(income) - 10.5) / 0.6 + 0.4 * member + 0.7 * score + 0.6 * rng.normal(size=n)
    columns = {
        "income": income,
        "rate": rate,
        "member": np.where(member, "yes", "no").astype(object),
        "spend": spend,
        "visits": visits,
        "opened": (17897 + days).astype(float),  # 2019-01-01 on
        "region": region.astype(object),
        "score": score,
        "share": share,
        "channel": channel.astype(object),
    }
    label = np.where(z > 0.3, "yes", "no")
    return Table("bank", CLASSIFICATION, columns, label, ("member", "region", "channel"))


def _cells(header: list[str], rows: Rows, name: str, f: Callable[[str], str]) -> None:
    """Rewrite column `name`'s present cells where the party has it."""
    if name in header:
        j = header.index(name)
        for row in rows:
            if row[j] != "":
                row[j] = f(row[j])


def clean(h: list[str], rows: Rows) -> Written:
    _cells(h, rows, "opened", lambda v: str(date(1970, 1, 1) + timedelta(days=int(float(v)))))
    return h, rows, {}


def thousands(h: list[str], rows: Rows) -> Written:
    for name in ("income", "spend"):
        _cells(h, rows, name, lambda v: f"{float(v):,.2f}")
    return clean(h, rows)


def booleans(h: list[str], rows: Rows) -> Written:
    _cells(h, rows, "member", lambda v: "TRUE" if v == "yes" else "FALSE")
    return clean(h, rows)


def excel_crlf(h: list[str], rows: Rows) -> Written:
    return (*clean(h, rows)[:2], {"eol": "\r\n", "trailing": True})


def excel_crlf_bom(h: list[str], rows: Rows) -> Written:
    return (*clean(h, rows)[:2], {"eol": "\r\n", "trailing": True, "quote": True, "bom": True})


def semicolon(h: list[str], rows: Rows) -> Written:
    def european(v: str) -> str:
        return f"{float(v):,.2f}".replace(",", "_").replace(".", ",").replace("_", ".")

    for name in ("income", "rate", "spend", "score", "share", "visits"):
        _cells(h, rows, name, european)
    return (*clean(h, rows)[:2], {"delimiter": ";"})


def id_spaces(h: list[str], rows: Rows) -> Written:
    for row in rows:
        row[0] = f"  {row[0]} "
    return clean(h, rows)


EXPORTS: dict[str, Callable[[list[str], Rows], Written]] = {
    f.__name__: f for f in (clean, thousands, booleans, excel_crlf, excel_crlf_bom, semicolon)
}
EXPORTS["id_spaces"] = id_spaces


def export(directory: Path, k: int, name: str, path: Path) -> None:
    """Write party k's clean CSV under `directory` to `path` the way export `name` does."""
    with (directory / f"party{k}.csv").open(newline="") as f:
        table = list(csv.reader(f))
    header, rows, fmt = EXPORTS[name](table[0], table[1:])
    buf = io.StringIO()
    quoting = csv.QUOTE_ALL if fmt.get("quote") else csv.QUOTE_MINIMAL
    delimiter, eol = str(fmt.get("delimiter", ",")), str(fmt.get("eol", "\n"))
    writer = csv.writer(buf, delimiter=delimiter, lineterminator=eol, quoting=quoting)
    for row in [header, *rows]:
        writer.writerow([*row, *([""] if fmt.get("trailing") else [])])
    path.write_bytes((b"\xef\xbb\xbf" if fmt.get("bom") else b"") + buf.getvalue().encode())


def features(path: Path, block: int) -> dict[str, np.ndarray]:
    source = TableSource(
        path=path, id_column="id", label_column="label" if block == 0 else None, block=block,
        num_blocks=3, num_classes=None if block == 0 else 2,
    )  # fmt: skip
    data, _ = load_table_party(source)
    # a label party's label-only rows (IDs past its features) have no features to compare
    split = data.splits.values()
    return {str(i): row for s in split for i, row in zip(s.ids, s.features, strict=False)}


@pytest.mark.parametrize(
    ("case", "blocks"),
    [
        ("thousands", (0, 1)),
        ("excel_crlf", (0, 1, 2)),
        ("excel_crlf_bom", (0, 1, 2)),
        ("semicolon", (0, 1)),  # block 2's score is rounded to 2 decimals there
        ("id_spaces", (1,)),
        ("booleans", (0,)),
    ],
)
def test_given_a_spreadsheet_export_then_it_reads_as_the_clean_file(
    tmp_path: Path, case: str, blocks: tuple[int, ...]
) -> None:
    write_parties(bank(0, n=200), 0, tmp_path / "clean", blocks=BLOCKS)
    for k in blocks:
        clean_csv, messy = tmp_path / f"clean{k}.csv", tmp_path / f"{case}{k}.csv"
        export(tmp_path / "clean", k, "clean", clean_csv)
        export(tmp_path / "clean", k, case, messy)
        want, got = features(clean_csv, k), features(messy, k)
        assert sorted(got) == sorted(want)
        for i, row in want.items():
            np.testing.assert_allclose(got[i], row, rtol=1e-6, atol=1e-6)
