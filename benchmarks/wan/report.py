"""wan.md's section of a `vfl bench wan --tables` invocation (benchmarks.wan_tables): per table,
every recipe at every RTT (means over the seeds run), the centralised HistGradientBoosting row,
and the issue-43 acceptance checks computed from the same rows."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from benchmarks.report import md_table

Row = dict[str, Any]
FIELDS = (
    "rounds_to_model", "best_epoch", "epochs", "to_model_s", "rounds_s_to_model", "trained_s",
    "ms_per_round",
    "bytes_to_model",
)  # fmt: skip
SCORES = ("accuracy", "f1", "auc")
RATIO_AT_50 = 1.5  # time to the model at RTT 50 against RTT 0, with defaults
RTT_PER_ROUND = 1.2  # what the direct plane's exact round may add per RTT


def aggregate(rows: Sequence[Row]) -> dict[tuple[str, str, float], Row]:
    """(table, recipe, RTT) -> the means over its seeds of FIELDS and the scores, with `seeds`."""
    groups: dict[tuple[str, str, float], list[Row]] = {}
    for r in rows:
        groups.setdefault((r["table"], r["recipe"], float(r["rtt_ms"])), []).append(r)
    out = {}
    for key, group in groups.items():
        mean: Row = {"seeds": len(group)}
        for name in FIELDS:
            values = [r[name] for r in group if r.get(name) is not None]
            mean[name] = statistics.fmean(values) if values else None
        for name in SCORES:
            values = [r["scores"][name] for r in group if r["scores"].get(name) is not None]
            mean[name] = statistics.fmean(values) if values else None
        out[key] = mean
    return out


def rtts_per_round(cell: Row, zero: Row | None, rtt: float) -> float | None:
    """What the links add to a training round, in RTTs: (ms / round - RTT 0's) / RTT."""
    if zero is None or rtt <= 0:
        return None
    return (cell["ms_per_round"] - zero["ms_per_round"]) / rtt


def checks(means: dict[tuple[str, str, float], Row], table: str) -> list[str]:
    """The acceptance of issue 43 on one table, each line `holds` or `does not hold` with the
    figures it reads; a check whose cells were not run says so."""
    lines = []
    for recipe in ("defaults", "direct"):
        zero, at50 = means.get((table, recipe, 0.0)), means.get((table, recipe, 50.0))
        if zero is None or at50 is None:
            lines.append(f"- `{recipe}`: RTT 0 or 50 not run")
            continue
        ratio = at50["to_model_s"] / zero["to_model_s"]
        lines.append(
            f"- `{recipe}`: time to the model at RTT 50 is {ratio:.2f}x RTT 0's "
            f"({at50['to_model_s']:.1f} s against {zero['to_model_s']:.1f} s; at most "
            f"{RATIO_AT_50:g}x: {_verdict(ratio <= RATIO_AT_50)})"
        )
        plain = means.get((table, "split-nn", 50.0))
        if plain is not None:
            faster = at50["to_model_s"] <= plain["to_model_s"]
            lines.append(
                f"- `{recipe}` against `split-nn` at RTT 50: {at50['to_model_s']:.1f} s against "
                f"{plain['to_model_s']:.1f} s (at most: {_verdict(faster)}); accuracy "
                f"{_pct(at50['accuracy'])} against {_pct(plain['accuracy'])}, F1 "
                f"{_pct(at50['f1'])} against {_pct(plain['f1'])}, AUC {_num(at50['auc'])} "
                f"against {_num(plain['auc'])}"
            )
    # the direct plane's exact round: `direct`, and `defaults` where auto chose direct
    for (t, recipe, rtt), cell in sorted(means.items(), key=lambda kv: (kv[0][1], kv[0][2])):
        if t != table or recipe not in ("defaults", "direct") or rtt <= 0:
            continue
        added = rtts_per_round(cell, means.get((table, recipe, 0.0)), rtt)
        if added is not None:
            lines.append(
                f"- `{recipe}` at RTT {rtt:g}: a round takes {cell['ms_per_round']:.1f} ms, "
                f"{added:.2f} RTT more than at RTT 0 (at most {RTT_PER_ROUND:g}: "
                f"{_verdict(added <= RTT_PER_ROUND)})"
            )
    return lines


def section(record: dict[str, Any]) -> list[str]:
    m, job = record["machine"], record["job"]
    load = " and ".join(f"{x:.1f}" for x in record["load_average"])
    seeds = sorted({r["seed"] for r in record["rows"]})
    lines = [
        f"## `{record['label']}` (tables to a model): code {record['code']}, finished "
        f"{record['finished']}",
        "",
        f"- Command: `{record['command']}`",
        f"- {job['mbit']:g} Mbit/s on every link; seeds {', '.join(map(str, seeds))}; recipes: "
        + ", ".join(f"`{r}` ({' '.join(a) or 'the defaults'})" for r, a in job["recipes"].items()),
        *(["- **Partial**: the invocation has not finished."] if record.get("partial") else []),
        *(
            [
                "- Not run within the invocation's time limit: "
                + ", ".join(f"{t} `{r}` RTT {rtt:g} seed {s}" for t, r, rtt, s in record["not_run"])
            ]
            if record.get("not_run")
            else []
        ),
        f"- Machine: {m.get('cores')}-core CPU, torch {m.get('torch')}; "
        f"{record['seconds'] / 60:.0f} min in all; 1-minute load average {load} at start and "
        "end (other people's jobs share the cores: wall times are loaded-machine figures, "
        "compare only within this section).",
        "",
    ]
    means = aggregate(record["rows"])
    for table in dict.fromkeys(r["table"] for r in record["rows"]):
        lines += [f"### {table}", "", *_table(means, table, record.get("hgb", [])), ""]
        lines += ["Acceptance (issue 43), from the rows above:", "", *checks(means, table), ""]
    return lines


def _table(means: dict[tuple[str, str, float], Row], table: str, hgb: list[Row]) -> list[str]:
    body = []
    for (t, recipe, rtt), cell in means.items():
        if t != table:
            continue
        zero = means.get((t, recipe, 0.0))
        ratio = cell["to_model_s"] / zero["to_model_s"] if zero else None
        added = rtts_per_round(cell, zero, rtt)
        extra = cell["ms_per_round"] - zero["ms_per_round"] if zero and rtt > 0 else None
        body.append(
            [
                f"`{recipe}`",
                f"{rtt:g}",
                f"{cell['rounds_to_model']:.0f}",
                f"{cell['best_epoch']:.0f} / {cell['epochs']:.0f}",
                f"{cell['to_model_s']:.1f}",
                "-" if ratio is None else f"{ratio:.2f}",
                _num1(cell.get("rounds_s_to_model")),
                f"{cell['trained_s']:.1f}",
                f"{cell['ms_per_round']:.1f}",
                "-" if extra is None else f"{extra:+.1f} ({added:.2f} RTT)",
                _pct(cell["accuracy"]),
                _pct(cell["f1"]),
                _num(cell["auc"]),
                "-" if cell["bytes_to_model"] is None else f"{cell['bytes_to_model'] / 2**20:.1f}",
            ]
        )
    for h in (h for h in hgb if h["table"] == table):
        s = h["scores"]
        cells = [_pct(s.get("accuracy")), _pct(s.get("f1")), _num(s.get("auc"))]
        body.append(["HistGradientBoosting (central)", "-", "-", "-", f"{h['fit_s']:.1f}"])
        body[-1] += ["-"] * 5 + [*cells, "-"]
    return md_table(
        [
            "recipe",
            "RTT ms",
            "rounds to the model",
            "best / epochs",
            "s to the model",
            "x RTT 0",
            "of which rounds s",
            "s trained",
            "ms / round",
            "vs RTT 0 ms / round",
            "accuracy %",
            "F1 x 100",
            "AUC",
            "MiB to the model",
        ],
        body,
    )


def _verdict(ok: bool) -> str:
    return "holds" if ok else "does not hold"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}"


def _num1(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
