"""Synthetic party tables for the tabular tests: a bank, a retailer and a telecom that share only
part of their customers, with numeric and categorical columns, gaps, and labels at the bank; and
a house-price regression split between an owner (with the prices) and an agent."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from vfl_core.data.tabular import TableSource

# Distinctive strings, so that a search of the wire traffic for them cannot match by chance.
REGIONS = ("Northshire", "Southmoor", "Eastwold", "Westmarch", "Centrebury")
CHANNELS = ("web-shop", "in-store", "mobile-app")
SEGMENTS = ("basic-plan", "plus-plan", "premium-plan")
MERCHANTS = tuple(f"merchant-{i:02d}" for i in range(40))  # above the one-hot threshold
COLUMNS = {
    "bank": ("customer_id", "yearly_income", "age_years", "home_region", "defaulted"),
    "retail": ("customer_id", "basket_spend", "merchant_name", "sales_channel"),
    "telecom": ("customer_id", "call_minutes", "tariff_segment"),
}
LABEL_COLUMN = "defaulted"
LABELS = ("no", "yes")
# The bank / retail / telecom tables as a federation's blocks (tests over real processes)
BLOCKS = {"bank": 0, "retail": 1, "telecom": 2}
ID_COLUMN = "customer_id"
HOUSE_ID = "house_id"  # the regression tables
PRICE = "price"


def write_tables(
    directory: Path, n: int = 600, share: float = 0.8, seed: int = 0
) -> dict[str, Path]:
    """Write bank.csv, retail.csv and telecom.csv; each party holds a random `share` of the
    customers (so they overlap only in part) and about 10% of some cells are empty."""
    rng = np.random.default_rng(seed)
    ids = np.array([f"C{i:05d}" for i in range(n)])
    income = rng.normal(50_000, 15_000, n)
    merchant = rng.integers(0, len(MERCHANTS), n)
    minutes = rng.gamma(2.0, 100.0, n)
    risk = -(income - 50_000) / 15_000 + (merchant % 4 == 0) * 1.5 + (minutes - 200) / 140
    default = risk + rng.normal(0, 0.5, n) > 0.6
    rows = {
        "bank": [
            (
                i,
                f"{income[k]:.2f}",
                str(int(rng.integers(18, 80))),
                _pick(rng, REGIONS),
                LABELS[int(d)],
            )
            for k, (i, d) in enumerate(zip(ids, default, strict=True))
        ],
        "retail": [
            (i, f"{rng.gamma(3.0, 40.0):.2f}", MERCHANTS[merchant[k]], _pick(rng, CHANNELS))
            for k, i in enumerate(ids)
        ],
        "telecom": [(i, f"{minutes[k]:.1f}", _pick(rng, SEGMENTS)) for k, i in enumerate(ids)],
    }
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, table in rows.items():
        held = rng.random(n) < share
        cells = [list(row) for row, keep in zip(table, held, strict=True) if keep]
        for row in cells:  # gaps in every feature column, never in the ID or the label
            for j in range(1, len(row) - (name == "bank")):
                if rng.random() < 0.1:
                    row[j] = ""
        order = rng.permutation(len(cells))  # row order differs between parties
        paths[name] = directory / f"{name}.csv"
        with paths[name].open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(COLUMNS[name])
            writer.writerows(cells[i] for i in order)
    return paths


def write_linear_tables(
    directory: Path, n: int = 400, share: float = 1.0, seed: int = 0
) -> dict[str, Path]:
    """Regression: owner.csv (two columns and the price) and agent.csv (two more columns and a
    category), a noisy linear function of columns on both sides, so neither party predicts it
    alone. Each party holds a random `share` of the houses."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 1, (n, 4))
    district = rng.integers(0, 3, n)
    price = 3.0 * x[:, 0] - 2.0 * x[:, 1] + 2.5 * x[:, 2] + 1.5 * x[:, 3] + 1.0 * district
    price = 100.0 + 10.0 * (price + rng.normal(0, 0.3, n))  # original units far from 0 and 1
    ids = [f"H{i:04d}" for i in range(n)]
    tables = {
        "owner": (
            (HOUSE_ID, "area", "age", PRICE),
            [
                (i, f"{a:.4f}", f"{b:.4f}", f"{p:.3f}")
                for i, a, b, p in zip(ids, *x[:, :2].T, price, strict=True)
            ],
        ),
        "agent": (
            (HOUSE_ID, "rooms", "noise_level", "district"),
            [
                (i, f"{c:.4f}", f"{d:.4f}", f"d{k}")
                for i, c, d, k in zip(ids, *x[:, 2:].T, district, strict=True)
            ],
        ),
    }
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, (header, rows) in tables.items():
        paths[name] = directory / f"{name}.csv"
        with paths[name].open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(header)
            held = np.flatnonzero(rng.random(n) < share)
            writer.writerows(rows[k] for k in rng.permutation(held))  # rows in any order
    return paths


def bank_sources(paths: dict[str, Path]) -> tuple[TableSource, ...]:
    """The in-process federation's sources for write_tables' files: labels at the bank."""
    return tuple(
        TableSource(
            path=paths[name],
            id_column=ID_COLUMN,
            label_column=LABEL_COLUMN if name == "bank" else None,
            block=block,
            num_blocks=len(BLOCKS),
        )
        for name, block in BLOCKS.items()
    )


def bank_client_args(path: Path) -> list[str]:
    """A vfl-client's table options for one of write_tables' files."""
    args = ["--id-column", ID_COLUMN, "--block", str(BLOCKS[path.stem]), "--clients", "3"]
    return args + (["--label-column", LABEL_COLUMN] if path.stem == "bank" else [])


def _pick(rng: np.random.Generator, values: tuple[str, ...]) -> str:
    return values[int(rng.integers(0, len(values)))]
