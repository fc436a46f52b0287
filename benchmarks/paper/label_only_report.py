"""The report of `vfl bench label-only` (benchmarks/label_only.py): two tables and how they were
measured."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.paper.label_only import (
    CENTRAL,
    OTHER_SETS,
    WITH_LABELS,
    LabelOnlyJob,
    collect,
    pooled,
    records,
    stat,
)
from benchmarks.report import md_table

Found = dict[str, dict[int, dict[str, dict[str, Any]]]]
NAMES = {
    "ours": "LASER-VFL, heads serve the others, label-only rows",
    "ours-no-label-only": "LASER-VFL, heads serve the others, no label-only rows",
    "paper": "LASER-VFL, the paper's objective, no label-only rows",
    CENTRAL: "centralised model on the same blocks",
}


def _name(blocks: tuple[int, ...]) -> str:
    return ",".join(map(str, blocks))


def _values(found: Found, variant: str, observed: str, metric: str) -> list[float]:
    return [
        rows[observed][metric]
        for rows in found.get(variant, {}).values()
        if rows.get(observed, {}).get(metric) is not None
    ]


def _pooled(found: Found, variant: str, sets: Sequence[tuple[int, ...]]) -> list[float]:
    values = [pooled(rows, sets) for rows in found.get(variant, {}).values()]
    return [v for v in values if v is not None]


def _paired(found: Found, a: str, b: str, sets: Sequence[tuple[int, ...]]) -> str:
    """Mean ± std over seeds of the per-seed difference a - b of the pooled accuracy, points."""
    seeds = sorted(set(found.get(a, {})) & set(found.get(b, {})))
    diffs = [
        100.0 * (pooled(found[a][s], sets) - pooled(found[b][s], sets))  # type: ignore[operator]
        for s in seeds
        if pooled(found[a][s], sets) is not None and pooled(found[b][s], sets) is not None
    ]
    if not diffs:
        return "—"
    std = float(np.std(diffs, ddof=1)) if len(diffs) > 1 else 0.0
    return f"{np.mean(diffs):+.2f} ± {std:.2f} points ({len(diffs)} seeds)"


def _samples(found: Found, observed: str) -> str:
    counts = _values(found, "ours", observed, "samples") or _values(
        found, "paper", observed, "samples"
    )
    return f"{np.mean(counts):.0f}" if counts else "—"


def others_table(found: Found) -> list[str]:
    rows = []
    for blocks in OTHER_SETS:
        o = _name(blocks)
        rows.append(
            [o, _samples(found, o)]
            + [stat(_values(found, v, o, m)) for m in ("accuracy", "f1") for v in ("ours", CENTRAL)]
        )
    rows.append(
        [
            "all three",
            "",
            stat(_pooled(found, "ours", OTHER_SETS)),
            stat(_pooled(found, CENTRAL, OTHER_SETS)),
            "",
            "",
        ]
    )
    header = ["observed set", "test samples", "accuracy, LASER-VFL", "accuracy, centralised"]
    return md_table([*header, "F1 x 100, LASER-VFL", "F1 x 100, centralised"], rows)


def with_labels_table(found: Found) -> list[str]:
    variants = ("paper", "ours-no-label-only", "ours")
    rows = []
    for blocks in WITH_LABELS:
        o = _name(blocks)
        rows.append(
            [o, _samples(found, o)]
            + [stat(_values(found, v, o, "accuracy")) for v in variants]
            + [stat(_values(found, v, o, "f1")) for v in variants]
        )
    rows.append(
        ["all four", "", *(stat(_pooled(found, v, WITH_LABELS)) for v in variants), "", "", ""]
    )
    header = ["observed set", "test samples"]
    header += [f"accuracy, {v}" for v in variants] + [f"F1 x 100, {v}" for v in variants]
    return md_table(header, rows)


def _provenance(job: LabelOnlyJob) -> list[str]:
    recs = records(job)
    if not recs:
        return ["No finished runs yet."]
    loads = [r["load_average"][0] for r in recs if r.get("load_average")]
    seconds = [r.get("seconds") for r in recs if r.get("seconds") is not None]
    machine = recs[0].get("machine", {})
    lines = [
        f"- command: `{recs[0].get('command', job.command) or job.command}`",
        f"- code: {', '.join(sorted({str(r.get('code')) for r in recs}))}; runs from "
        f"{min(r['started'] for r in recs)} to {max(r['finished'] for r in recs)} (UTC)",
        f"- machine: {machine.get('cores')} cores ({machine.get('cpu')}), torch "
        f"{machine.get('torch')}, one torch thread per run; shared with other people's jobs: "
        f"1-minute load average at the start of each run {min(loads):.2f} to {max(loads):.2f}",
    ]
    if seconds:
        lines.append(
            f"- a federation run took {min(seconds):.0f} to {max(seconds):.0f} s (median "
            f"{np.median(seconds):.0f} s)"
        )
    return lines


def write_report(job: LabelOnlyJob) -> tuple[Path, str]:
    found = collect(job)
    config = job.config("ours", 0)
    train = config["train"]
    lines = [
        f"# Predictions for samples the label party does not hold ({job.dataset})",
        "",
        f"K = 3 column blocks of {job.dataset}, labels at block 0 only, every party misses each "
        f"train and test sample with p_miss {job.p_miss}; seeds {', '.join(map(str, job.seeds))}; "
        f"training: {json.dumps(train, sort_keys=True)} (method laser). Variants, each run for "
        "every seed in the same invocation:",
        "",
        *(f"- `{v}`: {n}" for v, n in NAMES.items()),
        "",
        "The centralised model is one party's model (same hidden sizes, embedding and linear "
        "head) on the joined blocks of the set, trained in one process with the same optimiser, "
        "epochs, batch size and class balancing on every training sample the set's parties "
        "observe, and tested on the test samples observed by exactly that set: where the "
        "features are is the only difference. Accuracy and F1 as in the federation's table "
        "(per observed set; F1 of the positive class for two classes, mean over classes "
        "otherwise); mean ± sample std over seeds (seeds in parentheses).",
        "",
        *_provenance(job),
        "",
        "## Samples observed only by the other parties",
        "",
        *others_table(found),
        "",
        f"LASER-VFL minus centralised, accuracy of the three sets taken together: "
        f"{_paired(found, 'ours', CENTRAL, OTHER_SETS)}.",
        "",
        "## Observed sets that contain the label party",
        "",
        "Does serving the others cost the label party's own predictions?",
        "",
        *with_labels_table(found),
        "",
        f"Heads serve the others (no label-only rows) minus the paper's objective, the four sets "
        f"taken together: {_paired(found, 'ours-no-label-only', 'paper', WITH_LABELS)}; with "
        f"label-only rows minus the paper's: {_paired(found, 'ours', 'paper', WITH_LABELS)}.",
        "",
    ]
    text = "\n".join(lines)
    path = job.report_path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path, text
