"""Rounds and CPU seconds to the model, per table and setting, from the runs of
benchmarks.tabular_sweep (`--summarise DIR --rounds`): what a user over a WAN waits for (every
round crosses the network) beside the test quality.

Per run (one table, setting and seed), from the engine's epoch records (`vfl simulate`'s
results.json, with `--eval-every 1` for the test curve, a diagnostic that trains nothing):

- *to the model*: every epoch the run trained (early stopping's wait after the best epoch
  included: the model is there when training ends), its rounds that called parties and the
  process CPU seconds of those rounds (in process: every party's);
- *to within 0.2 points*: up to the first epoch whose test accuracy is within 0.2 points of
  the model's (the best epoch's, before the validation choice; regression: an RMSE within 0.2 %
  of the model's).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from benchmarks.pool import read_json

# classification: test accuracy within this many points (of 100); regression: RMSE within this
# share of the model's
WITHIN_POINTS = 0.2
WITHIN_RMSE_SHARE = 0.002
QUALITY = {
    "classification": (("accuracy", 100), ("f1", 100), ("auc", 100)),
    "regression": (("rmse", 1), ("mae", 1), ("r2", 1)),
}


def to_model(row: dict[str, Any]) -> dict[str, float]:
    """Epochs, rounds and CPU seconds to the model and to within 0.2 points of it (no CPU
    seconds where the row has none: over gRPC they are in other processes)."""
    rounds, cpu = row["rounds"], row.get("epoch_cpu_seconds")
    stop = row.get("early_stop") or {}
    best = stop.get("best_epoch", -1)
    best = best if best >= 0 else len(rounds) - 1  # no early stopping: the last epoch
    out = {
        "epochs": float(len(rounds)),
        "best_epoch": float(best + 1),
        "rounds": float(sum(rounds)),
    }
    if cpu is not None:
        out["cpu"] = float(sum(cpu))
    within = _first_within(row.get("curve") or [], best + 1)
    if within is not None:
        out["rounds_within"] = float(sum(rounds[:within]))
        if cpu is not None:
            out["cpu_within"] = float(sum(cpu[:within]))
    return out


def _first_within(curve: list[dict[str, Any]], best: int) -> int | None:
    """The first epoch (1-based) whose test score is within 0.2 points of epoch `best`'s."""
    by_epoch = {c["epoch"]: c for c in curve}
    if best not in by_epoch:
        return None
    model = by_epoch[best]
    for c in sorted(curve, key=lambda c: c["epoch"]):
        if "rmse" in model:
            if c["rmse"] <= model["rmse"] * (1 + WITHIN_RMSE_SHARE):
                return int(c["epoch"])
        elif 100 * c["accuracy"] >= 100 * model["accuracy"] - WITHIN_POINTS:
            return int(c["epoch"])
    return None


def _mean_sd(values: list[float]) -> str:
    if not values:
        return "-"
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.2f} ± {sd:.2f}"


def _mean(values: list[float], digits: int = 0) -> str:
    return f"{statistics.mean(values):.{digits}f}" if values else "-"


def summarise_rounds(root: Path, reference: str = "today") -> str:
    """A markdown table per table: each setting's test quality (mean ± sd over the seeds),
    epochs, rounds and CPU seconds to the model and to within 0.2 points, and its rounds
    against `reference`'s (the same table and seeds)."""
    runs: dict[str, dict[str, list[tuple[dict[str, Any], str]]]] = {}
    fits: dict[str, dict[str, list[dict[str, Any]]]] = {}  # baselines with their CPU seconds
    for path in sorted(root.glob("*/*.json")):
        run = read_json(path)
        if run is None:
            continue
        table = path.stem.rsplit("-s", 1)[0]
        for row in run["rows_run"]:
            if row["row"] == "federation" and "rounds" in row:
                runs.setdefault(table, {}).setdefault(path.parent.name, []).append(
                    (row, run["task"])
                )
            elif "cpu_seconds" in row:
                name = f"{path.parent.name} [{row['row']}]"
                fits.setdefault(table, {}).setdefault(name, []).append(row)
    out = []
    for table in sorted(runs):
        settings = runs[table]
        task = next(iter(settings.values()))[0][1]
        names = [m for m, _ in QUALITY[task]]
        out += [
            f"**{table}** ({len(next(iter(settings.values())))} seeds)",
            "",
            "| setting | "
            + " | ".join(names)
            + " | epochs (best) | rounds to the model | CPU s to the model | rounds to within "
            "0.2 | CPU s to within 0.2 | rounds vs " + reference + " |",
            "| --- " * (len(names) + 7) + "|",
        ]
        ref_rounds = [to_model(r)["rounds"] for r, _ in settings.get(reference, [])]
        for name in sorted(settings, key=lambda n: (n != reference, n)):
            rows = [r for r, _ in settings[name]]
            figures = [to_model(r) for r in rows]
            quality = [
                _mean_sd([scale * r["scores"]["all"][m] for r in rows if m in r["scores"]["all"]])
                for m, scale in QUALITY[task]
            ]
            rounds = [f["rounds"] for f in figures]
            ratio = (
                f"{statistics.mean(ref_rounds) / statistics.mean(rounds):.1f}x fewer"
                if ref_rounds and name != reference
                else ""
            )
            best = _mean([f["best_epoch"] for f in figures], 1)
            epochs = f"{_mean([f['epochs'] for f in figures], 1)} ({best})"
            cells = [
                *quality,
                epochs,
                _mean(rounds),
                _mean([f["cpu"] for f in figures if "cpu" in f], 1),
                _mean([f["rounds_within"] for f in figures if "rounds_within" in f]),
                _mean([f["cpu_within"] for f in figures if "cpu_within" in f], 1),
                ratio,
            ]
            out.append(f"| {name} | " + " | ".join(cells) + " |")
        for name, rows in sorted(fits.get(table, {}).items()):
            quality = [
                _mean_sd([scale * r["scores"]["all"][m] for r in rows if m in r["scores"]["all"]])
                for m, scale in QUALITY[task]
            ]
            cpu = _mean([r["cpu_seconds"] for r in rows], 1)
            out.append(f"| {name} | " + " | ".join([*quality, "-", "-", cpu, "-", "-", ""]) + " |")
        out.append("")
    return "\n".join(out)
