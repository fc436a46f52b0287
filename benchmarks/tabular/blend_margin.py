"""The heads' blend taken by wider rules than the defaults', read from two grid runs.

The defaults take the blend (the mean of the label party's heads' predictions) where its pooled
validation score beats the heads the choice picks without it (`choice.blend_wins`). A wider
rule takes it unless the pick beats it by a share of the pick's standard error, the widest
wherever it is a candidate. `run` runs the grid's `federation` row with the blend taken wherever
the pooled choice has it: the rule is replaced in this module's own worker processes, and
training is the same, bit for bit (the choice comes after it; checked in `rules` on the rounds
and the other candidates' validation scores). `rules` reads that run beside a run of the
defaults at the same code: where a rule takes the blend, its test scores are the first run's
(the decision threshold chosen on the blend's validation probabilities, as the rule would),
elsewhere the defaults'. Every wider rule takes the blend wherever the defaults do. Diabetes
has no validation split, so no pooled choice, and is not run.

    python -m benchmarks.tabular.blend_margin run --data-path ../shared/data \\
        --out benchmarks/results/runs/tabular-vertibench-blend-always --jobs 2
    python -m benchmarks.tabular.blend_margin rules \\
        benchmarks/results/runs/tabular-vertibench-zero-bias \\
        benchmarks/results/runs/tabular-vertibench-blend-always
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.pool import Task, run_tasks
from benchmarks.tabular.blend_rules import (
    HEADS,
    Pooled,
    Seed,
    _over_picked,
    _picked,
    rules_table,
)
from benchmarks.tabular.vertibench import SPLITS, _rows, run_cells, worker

# the grid's tables with a validation split (diabetes has none)
TABLES = (
    "census_like",
    "credit",
    "friedman",
    "gen_categorical",
    "gen_highcard",
    "gen_price",
    "gen_visits",
)


def _anywhere(blend: Any, picked: Any, full: Any, lower: bool) -> bool:
    """`choice.blend_wins` widened: wherever the blend was scored on the whole split."""
    return blend.value is not None and picked.value is not None and blend.scored >= full.scored


def blend_worker(payload: dict[str, Any]) -> dict[str, Any]:
    """The grid's worker with the blend taken wherever it is a candidate (this process only)."""
    import vfl_core.inference.choice as choice

    choice.blend_wins = _anywhere
    return worker(payload)


def _unless(share: float) -> Callable[[Pooled], bool]:
    """The blend unless the pick beats it by more than `share` of the pick's standard error."""

    def rule(p: Pooled) -> bool:
        pick = _picked(p)
        return p[3]["value"] - pick["value"] <= share * pick["error"]

    return rule


RULES: dict[str, Callable[[Pooled], bool]] = {
    "better than the heads picked without it (the defaults)": _over_picked(0.0),
    "unless the pick beats it by half the pick's standard error": _unless(0.5),
    "unless the pick beats it by the pick's standard error": _unless(1.0),
    "wherever it is a candidate": lambda p: True,
}


def _seeds(defaults: Path, anywhere: Path, grid: Path) -> dict[tuple[str, str], list[Seed]]:
    """Per cell, per seed: its task, the defaults' row, the row that took the blend anywhere,
    the pooled candidates and the grid's anchors; refuses runs whose training differs."""
    cells: dict[tuple[str, str], list[Seed]] = {}
    for table, split, runs, blends, anchors in run_cells(defaults, anywhere, grid):
        if table not in TABLES:
            continue
        for run, blend, anchor in zip(runs, blends, anchors, strict=True):
            if blend is None:
                raise ValueError(f"{table}/{split}: no run in {anywhere}")
            fed, other = _rows([run], "federation")[0], _rows([blend], "federation")[0]
            pooled = fed.get("pooled") or []
            if pooled and [c.get("head", "") for c in pooled] != HEADS:
                raise ValueError(f"{table}/{split}: pooled candidates {pooled}")
            values = [c["value"] for c in pooled[:3]]
            theirs = [c["value"] for c in (other.get("pooled") or [])[:3]]
            if fed["rounds"] != other["rounds"] or values != theirs:
                raise ValueError(f"{table}/{split}: the training differs from {defaults}'s")
            cells.setdefault((table, split), []).append(
                Seed(run["task"], fed, other, pooled, anchor)
            )
    return cells


def table(defaults: Path, anywhere: Path, grid: Path) -> str:
    """Where a rule takes the blend, as the defaults do, its runs compare as the same."""
    return rules_table(_seeds(defaults, anywhere, grid), RULES, "the defaults")


def _run(args: argparse.Namespace) -> None:
    tasks = [
        Task(
            f"{t} {split} s{seed}",
            {
                "table": t,
                "split": split,
                "seed": seed,
                "data_path": str(args.data_path) if args.data_path else None,
                "grpc": False,
                "rows": ["federation"],
                "federation_from": None,
            },
            args.out / t / f"{split}-s{seed}.json",
        )
        for t in TABLES
        for split in SPLITS
        for seed in (0, 1, 2)
    ]
    meta = {"command": "python -m benchmarks.tabular.blend_margin " + " ".join(sys.argv[1:])}
    failed = run_tasks(blend_worker, tasks, args.jobs, desc="cells", meta=meta)
    if failed:
        raise SystemExit(f"failed: {', '.join(failed)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    run = sub.add_parser("run", help="the grid's federation row, the blend wherever a candidate")
    run.add_argument("--data-path", type=Path, default=None)
    run.add_argument("--out", type=Path, required=True)
    run.add_argument("--jobs", type=int, default=2)
    rules = sub.add_parser("rules", help="each rule's cells, from the two runs")
    rules.add_argument("defaults", type=Path)
    rules.add_argument("anywhere", type=Path)
    rules.add_argument(
        "--grid", type=Path, default=Path("benchmarks/results/runs/tabular-vertibench")
    )
    args = parser.parse_args()
    if args.what == "run":
        _run(args)
    else:
        print(table(args.defaults, args.anywhere, args.grid))


if __name__ == "__main__":
    main()
