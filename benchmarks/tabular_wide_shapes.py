"""gen_wide's construction (benchmarks.tabular_tables._wide) at other shapes, the defaults against
options added to them: whether a rule on a party's rows per column could choose a regulariser
(issue 27; docs/tabular-defaults.md, "Why gen_wide and gen_multiclass miss HGB").

    python -m benchmarks.tabular_wide_shapes --out benchmarks/results/runs/tabular-wide-shapes
    python -m benchmarks.tabular_wide_shapes --summarise benchmarks/results/runs/tabular-wide-shapes

Each shape is make_classification(rows, columns, informative, informative // 2 redundant,
flip_y 0.02, class_sep 1), cut into the benchmark's three parties (labels at party 0, partial
overlap) and run with `vfl simulate` in process, seeds 0-2; one JSON per (setting, shape, seed)
under --out, cached (delete it to rerun).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.tabular_data import prepare
from benchmarks.tabular_federation import simulate_row
from benchmarks.tabular_tables import Column, Table
from vfl_core.data.learning_task import CLASSIFICATION

# shape -> (rows, columns, informative columns); "gen_wide" is the benchmark's table
SHAPES: dict[str, tuple[int, int, int]] = {
    "gen_wide": (1000, 200, 20),
    "w400": (1000, 400, 20),
    "w200x600": (600, 200, 20),
    "w200x2k": (2000, 200, 20),
    "w100": (1000, 100, 20),
    "dense200": (1000, 200, 100),
    # few rows, mostly informative columns: where a rule on rows per column would also fire
    "s30x300": (300, 30, 20),
    "s60x400": (400, 60, 40),
}
SETTINGS: dict[str, list[str]] = {
    "defaults": [],
    "wd3e-2": ["--weight-decay", "3e-2"],
    "wd1e-1": ["--weight-decay", "1e-1"],
    "dropout0.5": ["--dropout", "0.5"],
}
SEEDS = (0, 1, 2)


def shape_table(shape: str, seed: int) -> Table:
    from sklearn.datasets import make_classification

    rows, cols, informative = SHAPES[shape]
    x, y = make_classification(
        n_samples=rows,
        n_features=cols,
        n_informative=informative,
        n_redundant=informative // 2,
        flip_y=0.02,
        class_sep=1.0,
        random_state=seed,
    )
    columns: dict[str, Column] = {f"w{j:03d}": x[:, j] for j in range(cols)}
    return Table(shape, CLASSIFICATION, columns, np.array([f"c{int(v)}" for v in y]))


def run(out: Path, settings: list[str], shapes: list[str]) -> None:
    for setting in settings:
        for shape in shapes:
            for seed in SEEDS:
                path = out / setting / f"{shape}-s{seed}.json"
                if path.is_file():
                    continue
                with tempfile.TemporaryDirectory(prefix="vfl-wide-shapes-") as tmp:
                    prep = prepare(shape_table(shape, seed), seed, Path(tmp) / "parties")
                    row = simulate_row(
                        "federation",
                        prep,
                        [0, 1, 2],
                        Path(tmp) / "fed.json",
                        None,
                        extra=tuple(SETTINGS[setting]),
                    )
                rows_per_column = [
                    len(p.splits["train"].ids) / p.meta.feature_shape[0] for p in prep.parties
                ]
                record = {
                    "accuracy": row["scores"]["all"]["accuracy"],
                    "epochs": row["epochs"],
                    "rows_per_column": rows_per_column,
                    "command": row["command"],
                }
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(record, indent=1))


def summarise(out: Path) -> str:
    """Mean test accuracy per (setting, shape), and the change from the defaults run by run."""
    acc: dict[tuple[str, str], dict[int, float]] = {}
    per_column: dict[str, float] = {}
    for path in sorted(out.glob("*/*.json")):
        shape, seed = path.stem.rsplit("-s", 1)
        record = json.loads(path.read_text())
        acc.setdefault((path.parent.name, shape), {})[int(seed)] = 100 * record["accuracy"]
        per_column.setdefault(shape, min(record["rows_per_column"]))
    shapes = [s for s in SHAPES if s in per_column]
    head = " | ".join(f"{s} ({per_column[s]:.1f})" for s in shapes)
    lines = [f"| setting | {head} | runs better / worse / equal |", "| --- " * (len(shapes) + 2)]
    lines[-1] += "|"
    for setting in [s for s in SETTINGS if any((s, t) in acc for t in shapes)]:
        cells, counts = [], [0, 0, 0]
        for shape in shapes:
            mine, base = acc.get((setting, shape), {}), acc.get(("defaults", shape), {})
            cells.append(f"{statistics.fmean(mine.values()):.2f}" if mine else "-")
            for seed in set(mine) & set(base):
                gain = mine[seed] - base[seed]
                counts[0 if gain > 1e-9 else 1 if gain < -1e-9 else 2] += 1
        tally = "" if setting == "defaults" else " / ".join(map(str, counts))
        lines.append(f"| {setting} | " + " | ".join(cells) + f" | {tally} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=Path("benchmarks/results/runs/tabular-wide-shapes")
    )
    parser.add_argument("--settings", nargs="*", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--shapes", nargs="*", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--summarise", type=Path)
    args = parser.parse_args()
    if args.summarise:
        print(summarise(args.summarise))
        return
    run(args.out, args.settings, args.shapes)


if __name__ == "__main__":
    main()
