"""The report of `vfl bench tabular`: per table, every row's metrics overall (mean +- sd over the
seeds) with its time to the model, the same per observed set, and a verdict line: does the
federation beat the label party alone and the linear model, and is it within 1.5 accuracy points
(10% RMSE) of HistGradientBoosting; where not, the measured figures that say why."""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks.pool import read_json
from benchmarks.tabular import TabularJob
from benchmarks.tabular.sweep import to_model
from vfl_core.atomic_files import write_text_atomically
from vfl_core.data.learning_task import REGRESSION

ROWS = ("linear", "hgb", "central_mlp", "label_alone", "federation", "federation_grpc")
CLASSIFICATION_METRICS = ("accuracy", "f1", "auc", "brier")
REGRESSION_METRICS = ("rmse", "mae", "r2")
ACCURACY_MARGIN = 0.015  # the "within 1.5 accuracy points of HGB"
RMSE_MARGIN = 0.10  # "within 10% RMSE"
# the ablation (its section is at the end): its runs' directories, its tables, its anchor
ABLATION_SWEEP = "tabular-ablation"
ABLATION_SCREEN = "tabular-ablation-screen"
ABLATION_TABLES = ("gen_categorical", "gen_skewed")
ABLATION_ANCHOR = "why-the-generated-tables-miss-hgb-the-ablation"

Runs = dict[str, list[dict[str, Any]]]  # row name -> that row of every seed's run


def records(job: TabularJob) -> list[dict[str, Any]]:
    """The job's finished runs."""
    found = (read_json(task.out) for task in job.tasks())
    return [r for r in found if r is not None]


def collect(found: list[dict[str, Any]]) -> dict[str, tuple[dict[str, Any], Runs]]:
    """Per table: the first run's table facts and each row's runs over the seeds."""
    out: dict[str, tuple[dict[str, Any], Runs]] = {}
    for record in found:
        _, runs = out.setdefault(record["payload"]["table"], (record, defaultdict(list)))
        for row in record["rows_run"]:
            runs[row["row"]].append({**row, "seed": record["payload"]["seed"]})
    return out


def write_report(job: TabularJob) -> tuple[Path, str]:
    text = render(job)
    path = job.results / f"{job.name}.md"
    write_text_atomically(path, text)
    return path, text


def render(job: TabularJob) -> str:
    found = records(job)
    lines = [
        f"# `vfl bench tabular`{' --quick' if job.quick else ''}: "
        "the federation's defaults on tables nobody tuned for",
        "",
        *_provenance(job, found),
        "",
        "K = 3 parties per table, one CSV each with an `id` column, read by `vfl simulate --data` "
        "(labels at party 0 only; parties 0, 1, 2 each miss a random 10%, 30%, 30% of the rows, "
        "drawn per seed; a row party 0 misses has no label anywhere; test rows: the project's "
        "ID-hash split, 20%). Rows: `linear` (logistic / ridge on the joined columns, missing "
        "cells mean-imputed with indicators, one-hot, standardised), `hgb` "
        "(HistGradientBoosting, missing cells NaN, categoricals native), `central_mlp` (the "
        "federation's representation model and head on the parties' preprocessed features "
        "side by side, trained with the federation's resolved settings), `label_alone` "
        "(`vfl simulate` with party 0's CSV only, K = 1), `federation` (`vfl simulate`, "
        "defaults, in process) and `federation_grpc` (one vfl-coordinator and three "
        "vfl-clients on loopback, defaults; plaintext and keyed-hash alignment, no TLS/PSI; "
        "its ID-hashing secret is not `vfl simulate`'s, which changes the batch plan, so it "
        "differs from `federation` by seed noise). "
        "Cells: mean +- sd over the seeds; `s` is the time to the model (fit; the federation's "
        "includes reading the CSVs and the test evaluation, gRPC's the processes' start). "
        "`rounds`: the federation's rounds that called parties, to the model (every epoch "
        "trained, early stopping's wait included); `CPU s`: the process CPU seconds of those "
        "rounds (in process: every party's; '-' over gRPC); `to 0.2`: the same up to the first "
        "epoch whose test accuracy (logged every epoch, a diagnostic) is within 0.2 points of "
        "the model's, RMSE within 0.2 %; means over the seeds. "
        "Per observed set: the parties holding the test row ('label_alone' is scored on all "
        "rows only). '-': not reported by that row (the federation reports no multi-class "
        "AUC). Brier: binary, the mean squared error of the positive-class "
        "probability (scikit-learn's brier_score_loss, as the federation reports it); more "
        "classes, the squared error summed over the classes. Details: "
        "docs/benchmarks-tabular.md.",
        "",
    ]
    collected = collect(found)
    missing = [t for t in job.tables if t not in collected]
    lines += _summary(collected)
    measured = not job.quick and (job.results / "runs" / ABLATION_SWEEP).is_dir()
    for table, (info, runs) in collected.items():
        lines += _table_section(table, info, runs, measured and table in ABLATION_TABLES)
    if missing:
        lines += [f"Not finished: {', '.join(missing)}.", ""]
    if not job.quick:
        lines += ablation_section(job.results / "runs", job.runs)
        for sweep in sorted((job.results / "runs").glob("tabular-sweep*")):
            lines += _sweep_section(sweep, job.runs)
        from benchmarks.tabular.vertibench import report_section

        lines += report_section(job.results / "runs" / "tabular-vertibench")
    return "\n".join(lines)


def _sweep_section(sweep: Path, baselines: Path) -> list[str]:
    """Settings the defaults were chosen from (benchmarks.tabular.sweep), side by side."""
    from benchmarks.tabular.sweep import SETTINGS, describe, summarise

    names = sorted(p.name for p in sweep.iterdir() if p.is_dir() and p.name in SETTINGS)
    options = "; ".join(f"`{name}`: {describe(name)}" for name in names)
    codes = sorted({(read_json(f) or {}).get("code", "?") for f in sweep.glob("*/*.json")})
    ran = set().union(*(_tables_run(sweep / n) for n in names if n.startswith("defaults")))
    others = sorted(_tables_run(sweep, "*/*.json") - ran)
    return [
        f"## The settings the defaults were chosen from: `{sweep.name}`",
        "",
        f"`python -m benchmarks.tabular.sweep --data-path ../shared/data --out {sweep} "
        f"--settings {' '.join(names)} --tables {' '.join(sorted(_tables_run(sweep, '*/*.json')))}`"
        f", then `--summarise {sweep}`: the `federation` row (the label party "
        "alone where a setting ends in `+alone`) on the same tables, seeds and party CSVs as "
        "above, in process, with options added to the defaults of the code the runs record "
        f"({', '.join(codes)}). "
        + (
            "The `defaults` rows are this benchmark's own federation and label_alone rows. "
            if not ran
            else "The `defaults` rows are that code's defaults, run beside the others"
            + (f" (on {', '.join(others)}: this benchmark's own rows). " if others else ". ")
        )
        + "Test accuracy (%) or RMSE, mean ± sd over seeds 0-2; the last column counts the "
        "(table, seed) runs better / worse / equal than the defaults'; bracketed rows are this "
        f"benchmark's baselines. Settings: {options}.",
        "",
        summarise(sweep, baselines),
        "",
        *_rounds_section(sweep),
    ]


def _rounds_section(sweep: Path) -> list[str]:
    """Where a sweep's runs recorded their rounds (benchmarks.tabular.sweep): per table, each
    setting's quality beside its rounds and CPU seconds to the model and to within 0.2 points."""
    from benchmarks.tabular.sweep import summarise_rounds

    if not any("rounds" in row for f in sweep.glob("*/*.json") for row in _rows(f)):
        return []
    return [
        f"Rounds and CPU seconds to the model (`--summarise {sweep} --rounds`): the rounds that "
        "called parties, every epoch trained (early stopping's wait included), and the process "
        "CPU seconds of those rounds (every party: one process); to within 0.2 points: up to "
        "the first epoch whose test accuracy (logged every epoch, a diagnostic) is within 0.2 "
        "points of the model's (RMSE within 0.2 %); quality: mean ± sd over the seeds, the "
        "federation in process.",
        "",
        summarise_rounds(sweep),
    ]


def _rows(path: Path) -> list[dict[str, Any]]:
    return (read_json(path) or {}).get("rows_run", [])


def _tables_run(directory: Path, pattern: str = "*.json") -> set[str]:
    """The tables with a cached run under `directory` (TABLE-sSEED.json)."""
    return {p.stem.rsplit("-s", 1)[0] for p in directory.glob(pattern)}


def _provenance(job: TabularJob, found: list[dict[str, Any]]) -> list[str]:
    """The command that ran the runs (as recorded in them), the code, the machine and when."""
    commands = sorted({r.get("command") or job.command for r in found}) or [job.command]
    if not found:
        return [f"Command: `{commands[0]}`; no run has finished."]
    codes = sorted({r["code"] for r in found})
    machine = found[0]["machine"]
    load = [round(x, 1) for r in found for x in r["load_average"][:1]]
    return [
        "Command: " + ", ".join(f"`{c}`" for c in commands) + " (from the project root, venv "
        "active; `--report-only` rewrites this file from the runs under "
        f"`{job.runs}`).",
        "",
        f"Code {', '.join(codes)}; {machine['cores']} CPU cores shared with other jobs, "
        f"{'a GPU' if machine['gpu'] else 'no GPU'}, "
        f"torch {machine['torch']}, one torch thread per process; runs from "
        f"{min(r['started'] for r in found)} to {max(r['finished'] for r in found)} UTC; "
        f"1-minute load average at the runs' ends {min(load)}-{max(load)}. Times are rough.",
    ]


def _summary(collected: dict[str, tuple[dict[str, Any], Runs]]) -> list[str]:
    """Which tables the federation passes on all three checks."""
    said = {t: verdict(runs, _is_reg(info)) for t, (info, runs) in collected.items()}
    passed = [t for t, v in said.items() if v.startswith("yes") and "NO" not in v]
    failed = [t for t in collected if t not in passed]
    return [
        f"**Summary:** the federation passes all three checks on {len(passed)} of "
        f"{len(collected)} tables ({', '.join(passed) or 'none'}); not on "
        f"{', '.join(failed) or 'none'} (each table's verdict says which check and why).",
        "",
    ]


def _is_reg(info: dict[str, Any]) -> bool:
    return bool(info["task"] == REGRESSION)


def _table_section(table: str, info: dict[str, Any], runs: Runs, measured: bool) -> list[str]:
    regression = info["task"] == REGRESSION
    metrics = REGRESSION_METRICS if regression else CLASSIFICATION_METRICS
    seeds = sorted({r["seed"] for rows in runs.values() for r in rows})
    lines = [
        f"## {table}",
        "",
        f"{info['task']}, {info['rows']} rows, {info['columns']} feature columns "
        f"({info['categorical']} categorical), seed {seeds[0]}: rows held {info['held']}, "
        f"{info['train']} labelled training and {info['test']} test rows; seeds {seeds}.",
        "",
        f"**Verdict:** {verdict(runs, regression)}",
        "",
        *(_ABLATION_NOTE if measured else []),
        *_REASONS.get(table, []),
        "| row | seeds | " + " | ".join(metrics) + " | epochs | s | rounds | CPU s | rounds to "
        "0.2 | CPU s to 0.2 |",
        "| --- " * (len(metrics) + 8) + "|",
    ]
    for name in ROWS:
        if name not in runs:
            continue
        row = runs[name]
        cells = [_cell([r["scores"]["all"].get(m) for r in row], m) for m in metrics]
        epochs = _cell([r.get("epochs") for r in row], "epochs")
        lines.append(
            f"| {name} | {len(row)} | " + " | ".join(cells) + f" | {epochs} | "
            f"{_cell([r['seconds'] for r in row], 's')} | {_rounds_cells(row)} |"
        )
    notes = sorted({f"{n}: {r['note']}" for n, rows in runs.items() for r in rows if r.get("note")})
    lines += [f"\nNote: {note}." for note in notes]
    lines += ["", "Per observed set:", "", "| set | row | samples | " + " | ".join(metrics) + " |"]
    lines.append("| --- " * (len(metrics) + 3) + "|")
    for name_set in _sets(runs):
        for name in ROWS:
            row = [r for r in runs.get(name, []) if name_set in r["scores"]]
            if not row or name == "label_alone":
                continue
            scores = [r["scores"][name_set] for r in row]
            cells = [_cell([s.get(m) for s in scores], m) for m in metrics]
            samples = _cell([s.get("samples") for s in scores], "samples")
            lines.append(f"| {name_set} | {name} | {samples} | " + " | ".join(cells) + " |")
    return [*lines, ""]


# Beside a verdict the ablation explains (its section is at the end of this module).
_ABLATION_NOTE = [
    f"Why it misses, measured factor by factor: [the ablation](#{ABLATION_ANCHOR}).",
    "",
]


# Beside a verdict whose reason a screen measured (benchmarks.tabular.sweep; its section is below).
_REASONS = {
    "gen_highcard": [
        "Why it misses logistic regression: the label is a logistic model of the one-hot "
        "categories and the numbers (benchmarks/tabular/tables.py, `_high_cardinality`), the "
        "`linear` row's own family; HGB and the central MLP fall below it too (the table below). "
        "Settings screened on it, none of which closes it (wider or narrower category "
        "embeddings, one-hot up to 64 values, the wide head, dropout, weight decay): "
        "[tabular-sweep-highcard](#the-settings-the-defaults-were-chosen-from-tabular-sweep-highcard).",
        "",
    ],
    "gen_wide": [
        'Why it misses HGB (docs/tabular-defaults.md, "Why gen_wide and gen_multiclass miss '
        "HGB\"): each party's MLP sees 66-67 columns, about 9 in 10 of them noise, on 555-722 "
        "training rows (8-11 rows a column, 71-73 validation samples: early stopping stays off) "
        "and fits its training rows by epoch 20 whatever its width; HGB on the label party's 67 "
        "columns alone (76.63) beats the federation on all 200. The gap is the MLP's against "
        "gradient boosting at each party, not the federation's (the central MLP on the joined "
        "columns is further below). Weight decay is what moves it, but the value that gains "
        "here (0.1: 78.69) collapses a 400-column table to the majority class, and 3e-2 "
        "(76.21) costs wine 2.76 points and a 300-row, 30-column table of informative columns "
        "2.19 at 15 rows a column: no rule on rows and columns chose it "
        "([tabular-sweep-tabwide](#the-settings-the-defaults-were-chosen-from-"
        "tabular-sweep-tabwide); "
        "`python -m benchmarks.tabular_wide_shapes` at commit 922ce9a, a module that has since "
        "left the tree).",
        "",
    ],
    "gen_multiclass": [
        "Passes in process, within one seed: seed 0 is 3.14 points below HGB, and over gRPC "
        "(another batch plan) the federation is 3.84 below. The measured reason is "
        "gen_categorical's: on the fully observed rows the central MLP scores 81.81 and the "
        "federation 75.65. Trained with one head on the zero-filled concatenation of the "
        "parties' embeddings instead (`--method zerofill`) the federation scores 72.55 in all "
        "(80.36 on those rows; 3 / 0 / 0 runs better): LASER-VFL's head on the mean of the "
        "embeddings, which also serves every subset, costs the full set, and a linear head on "
        "that mean (no interaction between parties' columns) loses 6.48 points "
        "([tabular-sweep-tabwide](#the-settings-the-defaults-were-chosen-from-"
        "tabular-sweep-tabwide)).",
        "",
    ],
}


def _sets(runs: Runs) -> list[str]:
    found = {s for r in runs.get("hgb", []) for s in r["scores"] if s != "all"}
    return sorted(found, key=lambda s: (-len(s), s))


def _cell(values: list[Any], metric: str) -> str:
    present = [float(v) for v in values if v is not None]
    if not present:
        return "-"
    scale = 100.0 if metric in ("accuracy", "f1") else 1.0
    fmt = {"s": ".1f", "epochs": ".0f", "samples": ".0f", "rmse": ".2f", "mae": ".2f"}.get(
        metric, ".4f"
    )
    if metric in ("accuracy", "f1"):
        fmt = ".2f"
    mean = statistics.fmean(present) * scale
    if len(present) < 2:
        return format(mean, fmt)
    return f"{format(mean, fmt)} ± {format(statistics.stdev(present) * scale, fmt)}"


# ---------------------------------------------------------------------------------- the verdict


def _mean(runs: Runs, row: str, metric: str) -> float | None:
    values = [r["scores"]["all"].get(metric) for r in runs.get(row, [])]
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


def verdict(runs: Runs, regression: bool) -> str:
    """Pass or fail on the issue's three conditions, with the figures that explain a failure."""
    metric = "rmse" if regression else "accuracy"
    fed, alone = _mean(runs, "federation", metric), _mean(runs, "label_alone", metric)
    linear, hgb = _mean(runs, "linear", metric), _mean(runs, "hgb", metric)
    if None in (fed, alone, linear, hgb):
        return "incomplete (a row did not finish)."
    assert fed is not None and alone is not None and linear is not None and hgb is not None
    better = (lambda a, b: a < b) if regression else (lambda a, b: a > b)
    close = fed <= hgb * (1 + RMSE_MARGIN) if regression else fed >= hgb - ACCURACY_MARGIN
    linear_name = "ridge" if regression else "logistic regression"
    margin = "10% RMSE" if regression else "1.5 accuracy points"
    checks = [
        ("beats the label party alone", better(fed, alone), "label_alone"),
        (f"beats {linear_name}", better(fed, linear), "linear"),
        (f"within {margin} of HGB", close, "hgb"),
    ]
    said = "; ".join(
        f"{_answer(ok, fed, base)}: {what}" for what, ok, base in _with_means(checks, runs, metric)
    )
    failed = [row for _, ok, row in checks if not ok]
    text = f"{said} ({_figures(runs, regression)})."
    return text if not failed else f"{text} {_reasons(runs, regression, failed)}"


def _with_means(
    checks: list[tuple[str, bool, str]], runs: Runs, metric: str
) -> list[tuple[str, bool, float | None]]:
    return [(what, ok, _mean(runs, row, metric)) for what, ok, row in checks]


def _answer(ok: bool, fed: float, base: float | None) -> str:
    if ok:
        return "yes"
    return "NO (a tie)" if base is not None and abs(fed - base) < 1e-9 else "NO"


def _paired(runs: Runs, row: str, metric: str, regression: bool) -> str | None:
    """federation minus `row`, seed by seed: mean +- sd (points, or RMSE)."""
    base = {r["seed"]: r["scores"]["all"].get(metric) for r in runs.get(row, [])}
    scale = 1.0 if regression else 100.0
    diffs = [
        scale * (r["scores"]["all"][metric] - base[r["seed"]])
        for r in runs.get("federation", [])
        if base.get(r["seed"]) is not None and r["scores"]["all"].get(metric) is not None
    ]
    if not diffs:
        return None
    sd = f" ± {statistics.stdev(diffs):.2f}" if len(diffs) > 1 else ""
    unit = "RMSE" if regression else "points"
    return f"federation − {row} per seed {statistics.fmean(diffs):+.2f}{sd} {unit}"


def _figures(runs: Runs, regression: bool) -> str:
    metric, unit = ("rmse", "RMSE") if regression else ("accuracy", "accuracy")
    scale, fmt = (1.0, ".2f") if regression else (100.0, ".2f")
    parts = []
    for row in ("federation", "label_alone", "linear", "hgb", "central_mlp"):
        value = _mean(runs, row, metric)
        if value is not None:
            parts.append(f"{row} {format(value * scale, fmt)}")
    return f"mean {unit}: " + ", ".join(parts)


def _rounds_cells(row: list[dict[str, Any]]) -> str:
    """Rounds and CPU seconds to the model and to within 0.2 points of it, means over the seeds
    (benchmarks.tabular.sweep; '-' where a row has no rounds, or no CPU or curve recorded)."""
    figures = [to_model(r) for r in row if r.get("rounds")]
    kinds = (("rounds", "epochs"), ("cpu", "s"), ("rounds_within", "epochs"), ("cpu_within", "s"))
    return " | ".join(_cell([f.get(k) for f in figures], kind).split(" ±")[0] for k, kind in kinds)


def _reasons(runs: Runs, regression: bool, failed: list[str]) -> str:
    """What the runs measured that bears on a failure: the federation against each row it did not
    pass, seed by seed; the epochs it trained; the central MLP against HGB (the model and its
    training, without federation); and in binary classification its predicted positive rate
    against the true one."""
    metric = "rmse" if regression else "accuracy"
    out = [p for p in (_paired(runs, row, metric, regression) for row in failed) if p]
    epochs = [r.get("epochs") for r in runs.get("federation", [])]
    out.append(f"the federation trained {sorted(set(e for e in epochs if e is not None))} epochs")
    curve = _curve_note(runs, regression)
    if curve is not None:
        out.append(curve)
    central, hgb = _mean(runs, "central_mlp", metric), _mean(runs, "hgb", metric)
    if central is not None and hgb is not None:
        scale = 1.0 if regression else 100.0
        out.append(
            f"the same model trained centrally on the joined features scores "
            f"{central * scale:.2f} against HGB's {hgb * scale:.2f}"
            + _whose_gap(central, hgb, regression)
        )
    if not regression:
        rate = _positive_rates(runs)
        if rate is not None:
            out.append(rate)
    return "Measured: " + "; ".join(out) + "."


def _whose_gap(central: float, hgb: float, regression: bool) -> str:
    """Whether the central MLP passes the HGB check the federation fails: then the gap is the
    federation's (per-party models, a mean of embeddings, LASER-VFL's subsets), else the model's."""
    near = central <= 1.1 * hgb if regression else central >= hgb - 0.015
    if near:
        return ", within the check: the gap is the federation's, not the model's"
    return ", outside it too: the gap is the model's against gradient boosting"


def predicted_positive_rate(accuracy: float, f1: float, positive: float) -> float:
    """Binary: the share of rows predicted positive, from the accuracy, the positive class's F1
    (below 1) and the true positive share. With TP, FP, FN as shares of the rows: accuracy =
    1 - FP - FN and F1 = 2TP / (2TP + FP + FN), so TP = F1 (1 - accuracy) / (2 (1 - F1)),
    FN = positive - TP, FP = 1 - accuracy - FN, and the predicted positives are TP + FP."""
    tp = f1 * (1 - accuracy) / (2 * (1 - f1))
    return tp + (1 - accuracy - (positive - tp))


def _curve_note(runs: Runs, regression: bool) -> str | None:
    """From the federation's test scores logged during training (a diagnostic): per seed the
    best one and its epoch, against the final one."""
    metric = "rmse" if regression else "accuracy"
    pick = min if regression else max
    scale = 1.0 if regression else 100.0
    best, at, final = [], [], []
    for r in runs.get("federation", []):
        points = [p for p in r.get("curve", []) if p.get(metric) is not None]
        if not points:
            return None
        top = pick(points, key=lambda p: p[metric])
        best.append(scale * top[metric])
        at.append(top["epoch"])
        final.append(scale * r["scores"]["all"][metric])
    unit = "RMSE" if regression else "accuracy"
    return (
        f"its test {unit} logged during training (a diagnostic, never used to choose) was at "
        f"best {statistics.fmean(best):.2f} (epochs {at}) against {statistics.fmean(final):.2f} "
        f"at the end"
    )


def _positive_rates(runs: Runs) -> str | None:
    """Binary: the federation's share of predicted positives, from its accuracy a, its F1 f and
    the true positive share p of the same test rows (predicted positives / n = f(1 - a)/(1 - f)
    - (a - 1 + p)), beside p."""
    fed = runs.get("federation", [])
    truth = {
        r["seed"]: r["scores"]["all"].get("true_positive_rate") for r in runs.get("linear", [])
    }
    rates, truths = [], []
    for r in fed:
        a, f, p = (
            r["scores"]["all"].get("accuracy"),
            r["scores"]["all"].get("f1"),
            truth.get(r["seed"]),
        )
        if a is None or f is None or p is None or f >= 1:
            return None
        rates.append(predicted_positive_rate(a, f, p))
        truths.append(p)
    if not rates:
        return None
    return (
        f"it predicted {100 * statistics.fmean(rates):.1f}% positives where "
        f"{100 * statistics.fmean(truths):.1f}% are positive (from its accuracy and F1)"
    )


# --------------------------------------------------------------------------------- the ablation
# Why the federation misses HistGradientBoosting on the generated tables (issue 27): one factor
# at a time, in process, 3 seeds, the benchmark's party CSVs otherwise. The section of
# benchmarks/results/tabular.md that `vfl bench tabular --report-only` renders from the runs
# under benchmarks/results/runs/tabular-ablation (the federation, benchmarks.tabular.sweep) and
# tabular-ablation-screen (the central model, benchmarks.tabular_screen at commit 922ce9a).


ABLATION_COMMANDS = """\
python -m benchmarks.tabular.sweep --data-path ../shared/data --jobs 2 \\
    --out benchmarks/results/runs/tabular-ablation --tables gen_categorical gen_skewed \\
    --settings defaults full-overlap zerofill plug svfl laser-concat zerofill-full-overlap
python -m benchmarks.tabular.sweep --data-path ../shared/data --jobs 2 \\
    --out benchmarks/results/runs/tabular-ablation --tables credit breast_cancer wine diabetes \\
    --settings zerofill
python -m benchmarks.tabular_screen --data-path ../shared/data \\
    --out benchmarks/results/runs/tabular-ablation-screen --tables gen_categorical gen_skewed \\
    --settings defaults towers-mean towers-concat towers-mean-drop0.5 towers-concat-drop0.5 \\
    towers-mean-head2 towers-mean-head256 towers-mean-head256x2
python -m benchmarks.tabular_screen --data-path ../shared/data \\
    --out benchmarks/results/runs/tabular-ablation-screen \\
    --tables credit breast_cancer wine diabetes --settings defaults towers-mean towers-concat
python -m benchmarks.tabular.sweep --summarise benchmarks/results/runs/tabular-ablation \\
    [--observed 0,1,2]
python -m benchmarks.tabular_screen --summarise benchmarks/results/runs/tabular-ablation-screen"""

ABLATION_SETTINGS = (
    "Federation settings (the first two tables): `defaults`, every default (LASER-VFL, the mean "
    "of the present parties' embeddings); `full-overlap`, every party holds exactly the rows "
    "the label party holds (the same labelled training and test rows, none missing a block), "
    "with `linear`, `hgb` and `central_mlp` rerun on those CSVs (the bracketed rows after its "
    "name, counted against the benchmark's own); `zerofill`, `plug`, `svfl`: the paper's "
    "split-learning baselines, one head at the label party on the concatenation of the K "
    "embeddings (zeros for a missing block; plug also drops present blocks at random while "
    "training; svfl trains on fully observed rows only and guesses at random for a row "
    "missing a block, as in the paper; `zerofill-full-overlap`: zerofill on the full-overlap "
    "CSVs); `laser-concat`: LASER-VFL's objective and subset "
    "choice with the head on the zero-filled concatenation instead of the mean (not the "
    "paper's; benchmarks.tabular.sweep.laser_concat). Central settings (the last table, "
    "benchmarks.tabular.rows): the central MLP (`defaults`: one representation model on "
    "the joined features) rebuilt in the federation's shape, one representation model per "
    "party on its own columns, fused by the mean of the present parties' embeddings "
    "(`towers-mean`) or their zero-filled concatenation (`towers-concat`), trained centrally "
    "on every block a row has; `-drop0.5` drops each present feature party's embedding "
    "with probability 0.5 while training (as PlugVFL does; LASER-VFL's subsets in a cheap "
    "form); `-head2`, `-head256`, `-head256x2`: a head of two hidden layers, of width 256, "
    "or both (the federation's: one of 64)."
)

ABLATION_READING = (
    "Reading it. gen_categorical: the central model built in the federation's shape, "
    "per-party towers met by the mean of their embeddings, scores what the federation scores "
    "(all rows and fully observed rows) with no federation and no subset objective; built "
    "with a concatenation and trained on the blocks each row has, it recovers most of the "
    "central MLP's lead, and so does the federation with a concatenating head (`zerofill`, "
    "within the check of HGB). A concatenation trained to serve subsets too (`laser-concat`, "
    "`plug`, `towers-concat-drop0.5`) loses it again: the full set's predictor pays for "
    "serving every subset, through the mean or through the subset terms. Full overlap does "
    "not close it (HGB gains more from the filled-in blocks than LASER-VFL does), while "
    "`zerofill-full-overlap` beats HGB. Most of the gap is on the fully observed rows "
    "(`--observed 0,1,2`). gen_skewed: on the fully observed rows the central MLP is as far "
    "below HGB as the federation (the model family's share); the federation's own share is "
    "on rows missing a party and disappears under full overlap. No concatenation is a "
    "default that holds: `zerofill` loses 8.2 points on wine and 1.9 on breast cancer, "
    "failing both tables' check against logistic regression; on wine LASER-VFL as the "
    "federation trains it scores 97.14 where every other model here scores 85.3-90.8 (the "
    "central model with the federation's mean of towers included). The defaults stay; "
    "docs/tabular-defaults.md has the figures and the decision."
)


def ablation_section(runs_root: Path, baselines: Path) -> list[str]:
    """The ablation's part of the report, or nothing where its runs are absent."""
    from benchmarks.tabular.sweep import summarise

    sweep, screen = runs_root / ABLATION_SWEEP, runs_root / ABLATION_SCREEN
    if not sweep.is_dir():
        return []
    lines = [
        "## Why the generated tables miss HGB: the ablation",
        "",
        f"The measured reason beside {' and '.join(ABLATION_TABLES)}'s verdicts; the commands "
        "(`benchmarks.tabular_screen` at commit 922ce9a, a module that has since left the tree):",
        "",
        "```",
        ABLATION_COMMANDS,
        "```",
        "",
        ABLATION_SETTINGS,
        "",
        "Test accuracy (%) or RMSE, mean ± sd over seeds 0-2, all test rows:",
        "",
        summarise(sweep, baselines),
        "",
        "The test rows every party holds (`--observed 0,1,2`; under `full-overlap` that is "
        "every test row, so not the same rows):",
        "",
        summarise(sweep, baselines, "0,1,2"),
        "",
    ]
    if screen.is_dir():
        lines += [
            "The central model in the federation's shape (rows named by setting; "
            "`defaults` is the benchmark's `central_mlp`):",
            "",
            summarise(screen, baselines),
            "",
        ]
    return [*lines, ABLATION_READING, ""]
