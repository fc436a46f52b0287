"""The stop-40 outsider pass over tables nobody here wrote (issue 27): one generated bank table
in three parties, written the ways a bank's or retailer's spreadsheet exports it, each run
through `vfl simulate` with defaults. Results and the cases' outcomes:
benchmarks/results/table_qa.md.

    python -m benchmarks.table_qa --out DIR [--table-seed 0] [CASE ...] [-- SIMULATE OPTIONS]

Writes OUT/clean{seed}/ (the benchmark's clean party CSVs and `baselines.json`: logistic
regression and HistGradientBoosting on the joined columns of the same split), then per case
OUT/cases/CASE-SEED/p{0,1,2}.csv, rewritten from the clean files, and the run's r.json,
stdout.txt and stderr.txt; one JSON line per case (exit code, accuracy, the "warning:" and
"error:" lines) on standard output and appended to OUT/results.jsonl. No case: every case.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import date, timedelta
from pathlib import Path

import numpy as np

from benchmarks.tabular_tables import Table
from vfl_core.data.learning_task import CLASSIFICATION

BLOCKS = (
    ("income", "rate", "member"),
    ("spend", "visits", "opened", "region"),
    ("score", "share", "channel"),
)
# IDs of 0..39 in the test split by ID hash at --test-fraction 0.2
TEST_IDS = {"3", "6", "12", "16", "19", "28", "32", "35", "39"}


def bank(seed: int, n: int = 3000) -> Table:
    """Income, a rate, membership, spend, visits, an opening date (days since 1970; the cases
    write it as a date), a region, a score, a share and a channel; the label depends on each."""
    rng = np.random.default_rng([seed, 40])
    income = np.round(np.exp(rng.normal(10.5, 0.6, n)), 2)
    rate = np.round(rng.uniform(0, 60, n), 1)
    member = rng.random(n) < 0.4
    spend = np.round(np.exp(rng.normal(7, 1, n)), 2)
    visits = rng.poisson(4, n).astype(float)
    days = rng.integers(0, 1500, n)
    region = rng.choice(["north", "south", "east", "west", "centre"], n)
    region_effect = {"north": 0.6, "south": -0.4, "east": 0.2, "west": -0.6, "centre": 0.1}
    score = rng.normal(0, 1, n)
    share = np.round(rng.uniform(0, 100, n), 0)
    channel = rng.choice(["web", "app", "branch"], n)
    channel_effect = {"web": 0.3, "app": 0.0, "branch": -0.4}
    z = (
        0.9 * (np.log(income) - 10.5) / 0.6
        - 0.02 * (rate - 30)
        + 0.4 * member
        + 0.5 * (np.log(spend) - 7)
        + 0.1 * (visits - 4)
        + 0.0008 * (days - 750)
        + np.array([region_effect[r] for r in region])
        + 0.7 * score
        - 0.01 * (share - 50)
        + np.array([channel_effect[c] for c in channel])
        + 0.6 * rng.normal(size=n)
    )
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


def clean(out: Path, seed: int) -> Path:
    """The clean party CSVs and the baselines of `seed`, written once."""
    from benchmarks.tabular_baselines import hgb_row, linear_row
    from benchmarks.tabular_data import prepare

    directory = out / f"clean{seed}"
    if (directory / "baselines.json").exists():
        return directory
    prep = prepare(bank(seed), seed, directory, blocks=BLOCKS)
    keep = ("accuracy", "f1", "auc", "brier")
    rows = {r["row"]: r["scores"]["all"] for r in (linear_row(prep), hgb_row(prep))}
    found = {name: {k: round(v, 4) for k, v in s.items() if k in keep} for name, s in rows.items()}
    (directory / "baselines.json").write_text(json.dumps(found))
    return directory


# ---------------------------------------------------------------- writing a case

Rows = list[list[str]]
Case = Callable[[int, list[str], Rows], tuple[list[str], Rows, dict[str, object]]]
CASES: dict[str, Case] = {}


def case(f: Case) -> Case:
    CASES[f.__name__] = f
    return f


def _iso(days: str) -> str:
    return str(date(1970, 1, 1) + timedelta(days=int(float(days))))


def _cells(header: list[str], rows: Rows, name: str, f: Callable[[str, int], str]) -> None:
    """Rewrite column `name`'s present cells (cell, row index) where the party has it."""
    if name in header:
        j = header.index(name)
        for i, row in enumerate(rows):
            if row[j] != "":
                row[j] = f(row[j], i)


def _dated(header: list[str], rows: Rows) -> None:
    _cells(header, rows, "opened", lambda v, i: _iso(v))


def _plain(k: int, h: list[str], rows: Rows) -> tuple[list[str], Rows, dict[str, object]]:
    _dated(h, rows)
    return h, rows, {}


def _amounts(fmt: Callable[[float], str], *names: str) -> Case:
    def write(k: int, h: list[str], rows: Rows) -> tuple[list[str], Rows, dict[str, object]]:
        for name in names:
            _cells(h, rows, name, lambda v, i: fmt(float(v)))
        return _plain(k, h, rows)

    return write


CASES["clean"] = _plain
CASES["thousands"] = _amounts(lambda v: f"{v:,.2f}", "income", "spend")
CASES["thousands_int"] = _amounts(lambda v: f"{round(v):,}", "income", "spend")
CASES["sci"] = _amounts(lambda v: f"{v:.4E}", "income")
CASES["accounting"] = _amounts(lambda v: f"({-v:.2f})" if v < 0 else f"{v:.2f}", "score")


@case
def currency(k: int, h: list[str], rows: Rows) -> tuple[list[str], Rows, dict[str, object]]:
    _cells(h, rows, "income", lambda v, i: f"${float(v):,.0f}")
    _cells(h, rows, "spend", lambda v, i: f"€{float(v):.2f}")
    return _plain(k, h, rows)


@case
def percent(k: int, h: list[str], rows: Rows) -> tuple[list[str], Rows, dict[str, object]]:
    _cells(h, rows, "rate", lambda v, i: f"{v}%")
    _cells(h, rows, "share", lambda v, i: f"{float(v):.0f}%")
    return _plain(k, h, rows)


@case
def booleans(k: int, h: list[str], rows: Rows) -> tuple[list[str], Rows, dict[str, object]]:
    _cells(h, rows, "member", lambda v, i: "TRUE" if v == "yes" else "FALSE")
    return _plain(k, h, rows)


def _marks(marks: list[str]) -> Case:
    def write(k: int, h: list[str], rows: Rows) -> tuple[list[str], Rows, dict[str, object]]:
        for name in ("income", "visits", "score", "region"):
            _cells(h, rows, name, lambda v, i: marks[i % len(marks)] if i % 10 == 3 else v)
        return _plain(k, h, rows)

    return write


CASES["missing_marks"] = _marks(["N/A", "-", "?", "NULL", "#N/A", ""])
CASES["missing_nodash"] = _marks(["N/A", "?", "NULL", "#N/A", ""])


@case
def excel_errors(k: int, h: list[str], rows: Rows) -> tuple[list[str], Rows, dict[str, object]]:
    _cells(h, rows, "score", lambda v, i: "#DIV/0!" if i % 50 == 7 else v)
    return _plain(k, h, rows)


@case
def dates_mixed(k: int, h: list[str], rows: Rows) -> tuple[list[str], Rows, dict[str, object]]:
    def f(v: str, i: int) -> str:
        y, m, d = _iso(v).split("-")
        return f"{d}/{m}/{y}" if i % 3 == 0 else f"{y}-{m}-{d}"

    _cells(h, rows, "opened", f)
    return h, rows, {}


@case
def dates_us(k: int, h: list[str], rows: Rows) -> tuple[list[str], Rows, dict[str, object]]:
    def f(v: str, i: int) -> str:
        y, m, d = _iso(v).split("-")
        return f"{m}/{d}/{y}"

    _cells(h, rows, "opened", f)
    return h, rows, {}


@case
def excel_crlf(k: int, h: list[str], rows: Rows) -> tuple[list[str], Rows, dict[str, object]]:
    return (*_plain(k, h, rows)[:2], {"eol": "\r\n", "trailing": True})


@case
def excel_crlf_bom(k: int, h: list[str], rows: Rows) -> tuple[list[str], Rows, dict[str, object]]:
    return (*_plain(k, h, rows)[:2], {"eol": "\r\n", "trailing": True, "quote": True, "bom": True})


@case
def semicolon(k: int, h: list[str], rows: Rows) -> tuple[list[str], Rows, dict[str, object]]:
    def european(v: str, i: int) -> str:
        return f"{float(v):,.2f}".replace(",", "_").replace(".", ",").replace("_", ".")

    for name in ("income", "rate", "spend", "score", "share", "visits"):
        _cells(h, rows, name, european)
    return (*_plain(k, h, rows)[:2], {"delimiter": ";"})


# ---------------------------------------------------------------- IDs


def _ids(f: Callable[[int, str], str]) -> Case:
    def write(k: int, h: list[str], rows: Rows) -> tuple[list[str], Rows, dict[str, object]]:
        for row in rows:
            row[0] = f(k, row[0])
        return _plain(k, h, rows)

    return write


CASES["id_spaces"] = _ids(lambda k, i: f"  {i} " if k == 1 else i)
CASES["id_zeros"] = _ids(lambda k, i: f"{int(i):06d}" if k == 2 else i)
CASES["id_email"] = _ids(
    lambda k, i: f"Customer.{i}@Example.COM" if k == 1 else f"customer.{i}@example.com"
)


@case
def id_dupes(k: int, h: list[str], rows: Rows) -> tuple[list[str], Rows, dict[str, object]]:
    if k == 1:
        rows.insert(50, list(rows[10]))
    return _plain(k, h, rows)


@case
def overlap5(k: int, h: list[str], rows: Rows) -> tuple[list[str], Rows, dict[str, object]]:
    """Only 5% of the feature-only parties' IDs are the label party's."""
    rng = np.random.default_rng(k)
    for row in rows:
        if k > 0 and rng.random() >= 0.05:
            row[0] = f"x{k}-{row[0]}"
    return _plain(k, h, rows)


@case
def id_other_key(k: int, h: list[str], rows: Rows) -> tuple[list[str], Rows, dict[str, object]]:
    """Party 1 keys its rows by 'customer' and keeps its own row number in a column 'id'."""
    if k == 1:
        h = ["customer", *h[1:], "id"]
        rows = [[*row, str(j + 1)] for j, row in enumerate(rows)]
    return _plain(k, h, rows)


@case
def partial_labels(k: int, h: list[str], rows: Rows) -> tuple[list[str], Rows, dict[str, object]]:
    for i, row in enumerate(rows):
        if k == 0 and i % 7 == 0:
            row[-1] = ""
    return _plain(k, h, rows)


# ---------------------------------------------------------------- columns and rows


@case
def col_order(k: int, h: list[str], rows: Rows) -> tuple[list[str], Rows, dict[str, object]]:
    """Party 1's columns reversed, its ID last."""
    if k == 1:
        order = [*range(len(h) - 1, 0, -1), 0]
        h, rows = [h[j] for j in order], [[row[j] for j in order] for row in rows]
    return _plain(k, h, rows)


def _renamed(block: int, old: str, new: str) -> Case:
    def write(k: int, h: list[str], rows: Rows) -> tuple[list[str], Rows, dict[str, object]]:
        if k == block:
            h[h.index(old)] = new
        return _plain(k, h, rows)

    return write


CASES["dup_header"] = _renamed(2, "share", "score")
CASES["col_named_label"] = _renamed(2, "channel", "label")  # a shop's own 'label' column
CASES["col_named_id"] = _renamed(1, "visits", "ID")


@case
def total_row(k: int, h: list[str], rows: Rows) -> tuple[list[str], Rows, dict[str, object]]:
    """A spreadsheet's totals line at the foot of the feature-only parties' files."""
    if k > 0:
        summed = ("spend", "visits", "score", "share")
        total = [
            f"{sum(float(r[j]) for r in rows if r[j]):.2f}" if h[j] in summed else ""
            for j in range(1, len(h))
        ]
        rows.append(["Total", *total])
    return _plain(k, h, rows)


# ---------------------------------------------------------------- labels


def _labels(f: Callable[[str, int], str]) -> Case:
    def write(k: int, h: list[str], rows: Rows) -> tuple[list[str], Rows, dict[str, object]]:
        for i, row in enumerate(rows):
            if k == 0:
                row[-1] = f(row[0], i)
        return _plain(k, h, rows)

    return write


CASES["one_class"] = _labels(lambda i, j: "no")
# the few 'yes' rows all hash into the test split
CASES["one_class_train"] = _labels(lambda i, j: "yes" if i in TEST_IDS else "no")


def _two_rows(ids: tuple[str, str]) -> Case:
    def write(k: int, h: list[str], rows: Rows) -> tuple[list[str], Rows, dict[str, object]]:
        rows = [[i, *row[1:]] for i, row in zip(ids, rows, strict=False)]
        if k == 0:
            rows[0][-1], rows[1][-1] = "yes", "no"
        return _plain(k, h, rows)

    return write


CASES["two_rows"] = _two_rows(("0", "1"))  # both training rows
CASES["two_rows_split"] = _two_rows(("2", "3"))  # 3 is a test row


# ---------------------------------------------------------------- running


def _read(directory: Path, k: int) -> tuple[list[str], Rows]:
    with (directory / f"party{k}.csv").open(newline="") as f:
        table = list(csv.reader(f))
    return table[0], table[1:]


def _write(path: Path, header: list[str], rows: Rows, fmt: dict[str, object]) -> None:
    buf = io.StringIO()
    quoting = csv.QUOTE_ALL if fmt.get("quote") else csv.QUOTE_MINIMAL
    delimiter, eol = str(fmt.get("delimiter", ",")), str(fmt.get("eol", "\n"))
    writer = csv.writer(buf, delimiter=delimiter, lineterminator=eol, quoting=quoting)
    for row in [header, *rows]:
        writer.writerow([*row, *([""] if fmt.get("trailing") else [])])
    path.write_bytes((b"\xef\xbb\xbf" if fmt.get("bom") else b"") + buf.getvalue().encode())


def run_case(out: Path, name: str, seed: int, extra: list[str]) -> dict[str, object]:
    """Write case `name`'s party files from the clean ones and run `vfl simulate` on them."""
    source = clean(out, seed)
    tag = name + ("-" + "_".join(a.strip("-") for a in extra) if extra else "")
    directory = out / "cases" / f"{tag}-{seed}"
    directory.mkdir(parents=True, exist_ok=True)
    for k in range(len(BLOCKS)):
        _write(directory / f"p{k}.csv", *CASES[name](k, *_read(source, k)))
    command = [sys.executable, "-m", "vfl_cli", "simulate"]
    for k in range(len(BLOCKS)):
        command += ["--data", str(directory / f"p{k}.csv")]
    result = directory / "r.json"
    command += ["--id-column", "id", "--label-column", "label", "--out", str(result)]
    command += ["--no-progress", *extra]
    result.unlink(missing_ok=True)
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    record: dict[str, object] = {"case": tag, "seed": seed, "rc": done.returncode}
    record["wall_s"] = round(time.perf_counter() - start, 1)
    (directory / "stdout.txt").write_text(done.stdout)
    (directory / "stderr.txt").write_text(done.stderr)
    if result.exists():
        found = json.loads(result.read_text())
        every = next(r for r in found["results"][0]["rows"] if r["observed"] == "all")
        record |= {k: round(every[k], 4) for k in ("accuracy", "f1", "auc") if k in every}
        record["epochs"] = len(found["epochs"])
    lines = (done.stderr + done.stdout).splitlines()
    said = ("warning", "error", "Traceback")
    record["said"] = [line for line in lines if line.startswith(said) or "Error:" in line]
    return record


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--table-seed", type=int, default=0, help="the table's rows and split")
    parser.add_argument("cases", nargs="*", metavar="CASE", help=", ".join(CASES))
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    args, extra = parser.parse_args(argv[:cut]), argv[cut + 1 :]
    unknown = [name for name in args.cases if name not in CASES]
    if unknown:
        parser.error(f"no case {', '.join(unknown)} (cases: {', '.join(CASES)})")
    for name in args.cases or list(CASES):
        record = run_case(args.out, name, args.table_seed, extra)
        with (args.out / "results.jsonl").open("a") as f:
            f.write(json.dumps(record) + "\n")
        print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
