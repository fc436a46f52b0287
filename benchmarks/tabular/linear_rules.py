"""The rule that takes the linear heads (ModelConfig.linear_lane), read from one grid run.

A run of VertiBench's grid whose row trained the towers' lanes and chose the linear heads by the
widest rule (the simplest model within one standard error of the best: Breiman et al., CART
s. 3.4.3) records, per run, every pooled candidate's validation score and standard error
(`pooled`) and, where it chose them, the linear heads' test scores. Every other prediction is
the same, bit for bit, as the run's `federation` row (the lanes change nothing else:
tests/test_linear_lane.py), so any narrower rule's test scores follow exactly: the row's where
the rule takes the linear heads, the federation's elsewhere. This prints each rule's cells as
the grid counts them (`vertibench.counts`).

    python -m benchmarks.tabular.linear_rules RUN --grid benchmarks/results/runs/tabular-vertibench
"""

from __future__ import annotations

import argparse
import statistics
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.tabular.vertibench import _metric, _rows, _score, judge_cell, run_cells

Pooled = list[dict[str, Any]]


def _widest(p: Pooled) -> bool:
    best = min(p, key=lambda c: c["value"])
    return p[2]["value"] - best["value"] <= best["error"]


def _by(factor: float) -> Callable[[Pooled], bool]:
    def rule(p: Pooled) -> bool:
        other = min(p[:2], key=lambda c: c["value"])
        return other["value"] - p[2]["value"] > factor * p[2]["error"]

    return rule


# Brier score or RMSE: lower is better. pooled = [LASER-VFL's heads, concatenating, linear].
RULES: dict[str, Callable[[Pooled], bool]] = {
    "never (the defaults before)": lambda p: False,
    "within one standard error of the best (the simplest model: Breiman's rule)": _widest,
    "better than both (the defaults)": _by(0.0),
    "better than both by half its standard error": _by(0.5),
    "better than both by its standard error (the concatenating head's rule)": _by(1.0),
}


def _takes(row: dict[str, Any], rule: Callable[[Pooled], bool]) -> bool:
    pooled = row.get("pooled") or []
    if len(pooled) < 3 or [c.get("head", "") for c in pooled[:3]] != ["", "concat", "linear"]:
        return False
    if rule(pooled) and not any(h["head"] == "linear" for h in row["heads"]):
        raise ValueError("the run's rule is narrower than the one read: no test score to read")
    return rule(pooled)


def table(root: Path, grid_root: Path, row: str) -> str:
    out = [
        "| the linear heads taken where they are ... | runs | within the bar of LightGBM | "
        "not below linear by more than its sd | ahead of splitnn | tables where taken |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    cells = list(run_cells(root, grid_root))
    for name, rule in RULES.items():
        tally, where = [0, 0, 0], Counter[str]()
        for table_name, _, runs, grid in cells:
            task, metric = runs[0]["task"], _metric(runs[0]["task"])
            values = []
            for run in runs:
                fed, lanes = _rows([run], "federation")[0], _rows([run], row)[0]
                took = _takes(lanes, rule)
                where[table_name] += took
                values.append(_score(lanes if took else fed, metric))
            flags = judge_cell(task, statistics.mean(values), grid)
            tally = [t + int(f) for t, f in zip(tally, flags, strict=True)]
        out.append(rule_line(name, where, tally))
    return "\n".join(out)


def rule_line(name: str, where: Counter[str], tally: list[int], *between: str) -> str:
    """A rules table's line: the rule, the runs it took, `between`, its cells within the bar,
    not below linear and ahead of splitnn, and the tables where it took runs."""
    tables = ", ".join(f"{t} {n}" for t, n in sorted(where.items()) if n) or "-"
    cells = [str(sum(where.values())), *between, *map(str, tally), tables]
    return f"| {name} | {' | '.join(cells)} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument(
        "--grid", type=Path, default=Path("benchmarks/results/runs/tabular-vertibench")
    )
    parser.add_argument("--row", default="lin4")
    args = parser.parse_args()
    print(table(args.run, args.grid, args.row))


if __name__ == "__main__":
    main()
