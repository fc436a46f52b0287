"""The label defences' frontier: attack AUC at the feature-only party against what each costs.

    python -m benchmarks.privacy_frontier RUNS.json [RUNS.json ...]

Reads the runs of `python -m benchmarks.privacy` (its .json, one or more files with the same
seeds and a `none` run per seed) and prints one markdown row per defence: the epochs trained, the
test accuracy and AUC (means over the seeds), their cost against the undefended run of the same
seed (mean of the paired differences: positive is a loss), and the feature-only party's norm,
direction and 5-NN attack AUCs at their worst epoch (mean over the seeds of each run's maximum).
`meets`: norm and direction <= 0.60 at a cost of <= 1 point of accuracy and <= 0.01 of AUC
(issue 32's acceptance, AUC's point read as 0.01).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

LIMIT_AUC, LIMIT_POINTS, LIMIT_AUC_COST = 0.60, 1.0, 0.01


def worst(run: dict[str, Any], attack: str) -> float:
    """The feature-only party's (not the coordinator's) AUC of `attack` at its best epoch."""
    values = [a[attack] for a in run["attacks"] if a["viewer"] != "coordinator" and a[attack]]
    return max(values)


def row(defence: str, runs: dict[int, dict[str, Any]], base: dict[int, dict[str, Any]]) -> str:
    seeds = sorted(s for s in runs if s in base)
    mean = statistics.mean
    accuracy = 100 * mean(runs[s]["accuracy"] for s in seeds)
    auc = mean(runs[s]["auc"] for s in seeds)
    points = 100 * mean(base[s]["accuracy"] - runs[s]["accuracy"] for s in seeds)
    auc_cost = mean(base[s]["auc"] - runs[s]["auc"] for s in seeds)
    norm, direction, knn = (
        mean(worst(runs[s], a) for s in seeds) for a in ("norm", "direction", "knn")
    )
    meets = (
        max(norm, direction) <= LIMIT_AUC and points <= LIMIT_POINTS and auc_cost <= LIMIT_AUC_COST
    )
    epochs = ", ".join(str(runs[s]["epochs_trained"]) for s in seeds)
    return (
        f"| {defence} | {len(seeds)} | {epochs} | {accuracy:.2f} | {auc:.4f} | {points:+.2f} | "
        f"{auc_cost:+.4f} | {norm:.3f} | {direction:.3f} | {knn:.3f} | {'yes' if meets else 'no'} |"
    )


def load(paths: list[Path], seeds: set[int] | None = None) -> dict[str, dict[int, dict[str, Any]]]:
    """defence -> seed -> run, from the runs of `paths` (only those of `seeds`, if given)."""
    by: dict[str, dict[int, dict[str, Any]]] = {}
    for path in paths:
        for run in json.loads(path.read_text()):
            if seeds is None or run["seed"] in seeds:
                by.setdefault(run.get("defence", "none"), {})[run["seed"]] = run
    return by


def per_seed(
    paths: list[Path],
    seeds: set[int] | None = None,
    base: str = "none",
    only: set[str] | None = None,
) -> str:
    """One markdown row per defence (of `only`, if given) and seed: the cost against `base` of
    the same seed, the attacks' worst epoch, and the early stop (best epoch, 1-based)."""
    by = load(paths, seeds)
    lines = [
        "| defence | seed | epochs trained | best epoch | test accuracy | test AUC | accuracy "
        "cost (points) | AUC cost | norm max | direction max | within both bounds |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for defence, runs in by.items():
        if only is not None and defence not in only:
            continue
        for seed, run in sorted(runs.items()):
            ref = by[base].get(seed)
            if ref is None:
                continue
            points = 100 * (ref["accuracy"] - run["accuracy"])
            auc_cost = ref["auc"] - run["auc"]
            norm, direction = worst(run, "norm"), worst(run, "direction")
            ok = max(norm, direction) <= LIMIT_AUC and points <= LIMIT_POINTS
            ok = ok and auc_cost <= LIMIT_AUC_COST
            stop = run.get("early_stop") or {}
            best = stop.get("best_epoch")
            if best is not None and stop.get("epochs_from") != 1:
                best += 1  # earlier results wrote it 0-based
            lines.append(
                f"| {defence} | {seed} | {run['epochs_trained']} | {best or '-'} | "
                f"{100 * run['accuracy']:.2f} | {run['auc']:.4f} | {points:+.2f} | "
                f"{auc_cost:+.4f} | {norm:.3f} | {direction:.3f} | {'yes' if ok else 'no'} |"
            )
    return "\n".join(lines)


def table(
    paths: list[Path],
    seeds: set[int] | None = None,
    base: str = "none",
    only: set[str] | None = None,
) -> str:
    """The markdown table of every defence in `paths` (of `only` and the runs of `seeds`, if
    given), paired with the `base` run of each seed."""
    by = load(paths, seeds)
    base_runs = by[base]
    lines = [
        "| defence | seeds | epochs trained | test accuracy | test AUC | accuracy cost (points) "
        "| AUC cost | norm max | direction max | 5-NN max | meets |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    lines += [row(d, runs, base_runs) for d, runs in by.items() if only is None or d in only]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="+", help="benchmarks.privacy .json files")
    parser.add_argument("--seeds", help="only these seeds (comma-separated); default: all")
    parser.add_argument("--base", default="none", help="the run each defence is paired with")
    parser.add_argument("--per-seed", action="store_true", help="one row per defence and seed")
    parser.add_argument("--defences", help="only these defences (comma-separated); default: all")
    args = parser.parse_args(argv)
    seeds = None if args.seeds is None else {int(v) for v in args.seeds.split(",")}
    only = None if args.defences is None else set(args.defences.split(","))
    show = per_seed if args.per_seed else table
    print(show(args.runs, seeds, args.base, only))


if __name__ == "__main__":
    main()
