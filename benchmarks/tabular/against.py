"""A grid run of the defaults read against issue 43's defaults and against an earlier run.

`rounds` reads, cell by cell, the `federation` row (the defaults) beside the `issue43` row of the
same worker (issue 43's defaults as options, `vertibench.DIAGNOSIS`), and for the tables too
small for a validation split the `issue43_small` row of a second run (issue 43's code trained
them every epoch): the rounds and the CPU seconds of the rounds to each model (every epoch
trained), by table and over every run, with the median of the runs' CPU ratios. `runs` reads
the `federation` rows of two runs of the grid (or other rows: `--new-row`, `--old-row`) run for
run: the runs with the same rounds, and the test score better, worse or the same, by table.

    python -m benchmarks.tabular.against rounds \\
        benchmarks/results/runs/tabular-vertibench-lane-l2 \\
        --small benchmarks/results/runs/tabular-vertibench-lane-l2-issue43-small
    python -m benchmarks.tabular.against runs \\
        benchmarks/results/runs/tabular-vertibench-lane-l2 \\
        benchmarks/results/runs/tabular-vertibench-zero-bias
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

from benchmarks.pool import read_json
from benchmarks.tabular.vertibench import _metric

Row = dict[str, Any]


def _row(run: dict[str, Any], name: str) -> Row | None:
    return next((r for r in run["rows_run"] if r["row"] == name), None)


def _cells(root: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """Every readable cell file of a run, by (table, file name)."""
    found = {}
    for path in sorted(root.glob("*/*.json")):
        run = read_json(path)
        if run is not None and "rows_run" in run:
            found[path.parent.name, path.name] = run
    return found


def _spread(values: list[float], digits: int, mean_digits: int | None = None) -> str:
    mean = digits if mean_digits is None else mean_digits
    return f"{statistics.median(values):.{digits}f} ({statistics.mean(values):.{mean}f})"


def rounds_table(root: Path, small: Path | None = None) -> str:
    """Rounds and CPU seconds of the rounds to the model: the defaults against issue 43's."""
    smalls = _cells(small) if small is not None else {}
    pairs: dict[str, list[tuple[Row, Row]]] = {}
    for (table, name), run in _cells(root).items():
        ours = _row(run, "federation")
        theirs = _row(smalls[table, name], "issue43_small") if (table, name) in smalls else None
        theirs = theirs or _row(run, "issue43")
        if ours is not None and theirs is not None:
            pairs.setdefault(table, []).append((ours, theirs))
    every = [p for table in sorted(pairs) for p in pairs[table]]
    out = [
        "| table | rounds to the model, the defaults: median (mean) | issue 43's defaults | CPU s "
        "of rounds, the defaults: median (mean) | issue 43's | CPU s, the defaults against "
        "issue 43's: median of the runs' ratios | runs with less / more CPU | runs with fewer "
        "/ more / as many rounds |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for label, runs in [*sorted(pairs.items()), (f"**all {len(every)} runs**", every)]:
        out.append(f"| {label} | " + " | ".join(_rounds_cells(runs)) + " |")
    return "\n".join(out)


def _rounds_cells(runs: list[tuple[Row, Row]]) -> list[str]:
    rounds = [(sum(a["rounds"]), sum(b["rounds"])) for a, b in runs]
    cpu = [(sum(a["epoch_cpu_seconds"]), sum(b["epoch_cpu_seconds"])) for a, b in runs]
    less = sum(a < b for a, b in cpu)
    fewer, more = sum(a < b for a, b in rounds), sum(a > b for a, b in rounds)
    return [
        _spread([float(a) for a, _ in rounds], 0, 1),
        _spread([float(b) for _, b in rounds], 0, 1),
        _spread([a for a, _ in cpu], 2),
        _spread([b for _, b in cpu], 2),
        f"{statistics.median(a / b for a, b in cpu):.2f}x",
        f"{less} / {len(cpu) - less}",
        f"{fewer} / {more} / {len(rounds) - fewer - more}",
    ]


def runs_table(
    new: Path, old: Path, new_row: str = "federation", old_row: str = "federation"
) -> str:
    """`new`'s `new_row` rows against `old`'s `old_row` rows, run for run, by table."""
    olds = _cells(old)
    tally: dict[str, list[int]] = {}
    for key, run in _cells(new).items():
        before = olds.get(key)
        ours, theirs = _row(run, new_row), before and _row(before, old_row)
        if ours is None or theirs is None:
            continue
        metric = _metric(run["task"])
        a, b = ours["scores"]["all"][metric], theirs["scores"]["all"][metric]
        gain = (b - a) if metric == "rmse" else (a - b)
        counts = tally.setdefault(key[0], [0, 0, 0, 0, 0])
        counts[0 if gain > 0 else 1 if gain < 0 else 2] += 1
        counts[3] += sum(ours["rounds"]) == sum(theirs["rounds"])
        counts[4] += 1
    out = [
        "| table | runs | the same rounds | better / worse / same on test |",
        "| --- | --- | --- | --- |",
    ]
    total = [sum(c[i] for c in tally.values()) for i in range(5)]
    for label, c in [*sorted(tally.items()), ("**all**", total)]:
        out.append(f"| {label} | {c[4]} | {c[3]} | {c[0]} / {c[1]} / {c[2]} |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rounds = sub.add_parser("rounds", help="the defaults' rounds and CPU against issue 43's")
    rounds.add_argument("run", type=Path)
    rounds.add_argument("--small", type=Path, help="a run of the `issue43_small` row")
    runs = sub.add_parser("runs", help="two runs' federation rows, run for run")
    runs.add_argument("new", type=Path)
    runs.add_argument("old", type=Path)
    runs.add_argument("--new-row", default="federation")
    runs.add_argument("--old-row", default="federation")
    args = parser.parse_args()
    if args.command == "rounds":
        print(rounds_table(args.run, args.small))
    else:
        print(runs_table(args.new, args.old, args.new_row, args.old_row))


if __name__ == "__main__":
    main()
