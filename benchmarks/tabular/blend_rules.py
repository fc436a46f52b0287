"""The rule that takes the mean of the label party's heads' predictions (the blend), read from
grid runs.

A run of VertiBench's grid whose row (`blend`) took the blend wherever the pooled validation
choice had it as a candidate records, per run, every pooled candidate's validation score and
standard error (LASER-VFL's heads, the concatenating heads, the linear heads, the blend) and
the blend's test scores. Training is the same, bit for bit, as at the defaults before it (the
choice comes after training; checked here on the pooled scores of the three other heads against
`tabular-vertibench-linear-lane-rules`' `lin4` row). The defaults before the blend predict as
`linear_rules` reads that run under their rule. So any rule's test scores follow exactly: the
blend's where the rule takes it, the defaults' elsewhere. This prints each rule's cells as the
grid counts the federation, and how its runs compare with the defaults' on test.

    python -m benchmarks.tabular.blend_rules RUN \
        --lanes benchmarks/results/runs/tabular-vertibench-linear-lane-rules
"""

from __future__ import annotations

import argparse
import statistics
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from benchmarks.tabular.linear_rules import RULES as LINEAR_RULES
from benchmarks.tabular.linear_rules import _takes, rule_line
from benchmarks.tabular.vertibench import _metric, _rows, _score, judge_cell, run_cells

Pooled = list[dict[str, Any]]


class Seed(NamedTuple):
    task: str
    default: dict[str, Any]  # the defaults' row before the blend
    blend: dict[str, Any]  # the row that took the blend wherever it could
    pooled: Pooled
    anchors: dict[str, Any]  # the grid's run of the same cell and seed


HEADS = ["", "concat", "linear", "blend"]
LINEAR_DEFAULT = LINEAR_RULES["better than both (the defaults)"]


def _picked(p: Pooled) -> dict[str, Any]:
    """The candidate the defaults before the blend take (vfl_core.inference.choice.pooled_pick
    without it): the concatenating heads where they beat LASER-VFL's by more than their
    standard error, else LASER-VFL's; the linear heads where better than both. The blend
    replaces it where it scores better (`choice.blend_wins`: the defaults' rule)."""
    laser, concat, linear = p[0], p[1], p[2]
    best = concat if laser["value"] - concat["value"] > concat["error"] else laser
    return linear if linear["value"] < min(laser["value"], concat["value"]) else best


def _over_all(factor: float) -> Callable[[Pooled], bool]:
    def rule(p: Pooled) -> bool:
        return min(c["value"] for c in p[:3]) - p[3]["value"] > factor * p[3]["error"]

    return rule


def _over_picked(factor: float) -> Callable[[Pooled], bool]:
    def rule(p: Pooled) -> bool:
        return _picked(p)["value"] - p[3]["value"] > factor * p[3]["error"]

    return rule


# Brier score or RMSE: lower is better. pooled = [LASER-VFL's, concatenating, linear, blend].
RULES: dict[str, Callable[[Pooled], bool]] = {
    "never (the defaults before)": lambda p: False,
    "always (wherever the pooled choice is made)": lambda p: True,
    "better than the heads picked without it (the defaults)": _over_picked(0.0),
    "better than the heads picked without it by half its standard error": _over_picked(0.5),
    "better than every other candidate": _over_all(0.0),
    "better than every other candidate by half its standard error": _over_all(0.5),
    "better than every other candidate by its standard error": _over_all(1.0),
}


def _runs(root: Path, lanes: Path, grid: Path) -> dict[tuple[str, str], list[Seed]]:
    """Per (table, split), per seed: its task, the defaults' row, the blend row and its pooled
    candidates ([]: no pooled choice was made); refuses runs whose training differs."""
    cells: dict[tuple[str, str], list[Seed]] = {}
    for table, split, runs, befores, anchors in run_cells(root, lanes, grid):
        for run, before, anchor in zip(runs, befores, anchors, strict=True):
            metric = _metric(run["task"])
            blend = _rows([run], "blend")[0]
            fed, lin4 = _rows([before], "federation")[0], _rows([before], "lin4")[0]
            pooled = blend.get("pooled") or []
            where = f"{table}/{split}"
            if pooled and [c.get("head", "") for c in pooled] != HEADS:
                raise ValueError(f"{where}: pooled candidates {pooled}")
            if [c["value"] for c in pooled[:3]] != [c["value"] for c in lin4.get("pooled") or []]:
                raise ValueError(f"{where}: the training differs from {lanes}'s")
            if not pooled and _score(blend, metric) != _score(fed, metric):
                raise ValueError(f"{where}: no choice made, yet not the defaults' scores")
            default = lin4 if _takes(lin4, LINEAR_DEFAULT) else fed
            cells.setdefault((table, split), []).append(
                Seed(run["task"], default, blend, pooled, anchor)
            )
    return cells


def table(root: Path, lanes: Path, grid_root: Path) -> str:
    return rules_table(_runs(root, lanes, grid_root), RULES, "the defaults before")


def rules_table(
    cells: dict[tuple[str, str], list[Seed]], rules: dict[str, Callable[[Pooled], bool]], than: str
) -> str:
    """Each rule's line: where it takes the blend, a seed scores its blend row, elsewhere its
    default row; its runs taken, how they compare with the default row on test (`than`), and
    the cells as the grid counts the federation."""
    out = [
        "| the blend taken where it is ... | runs | better / worse / same on test than "
        f"{than} | within the bar of LightGBM | not below linear by more than its sd | "
        "ahead of splitnn | tables where taken |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, rule in rules.items():
        tally, where, versus = [0, 0, 0], Counter[str](), [0, 0, 0]
        for (table_name, _), seeds in cells.items():
            task = seeds[0].task
            metric, values = _metric(task), []
            for _, default, blend, pooled, _ in seeds:
                took = bool(pooled) and rule(pooled)
                before, value = _score(default, metric), _score(blend if took else default, metric)
                if took:
                    where[table_name] += 1
                    gain = (before - value) if metric != "accuracy" else (value - before)
                    versus[0 if gain > 0 else 1 if gain < 0 else 2] += 1
                values.append(value)
            flags = judge_cell(task, statistics.mean(values), [s.anchors for s in seeds])
            tally = [t + int(f) for t, f in zip(tally, flags, strict=True)]
        out.append(rule_line(name, where, tally, " / ".join(map(str, versus))))
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument(
        "--lanes",
        type=Path,
        default=Path("benchmarks/results/runs/tabular-vertibench-linear-lane-rules"),
    )
    parser.add_argument(
        "--grid", type=Path, default=Path("benchmarks/results/runs/tabular-vertibench")
    )
    args = parser.parse_args()
    print(table(args.run, args.lanes, args.grid))


if __name__ == "__main__":
    main()
