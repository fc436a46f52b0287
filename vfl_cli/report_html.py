"""One self-contained HTML page for a run: inline CSS, PNG figures as base64 data URIs, tables."""

from __future__ import annotations

import base64
import html
from collections.abc import Iterable
from typing import Any

from vfl_cli.report_plots import Plot
from vfl_cli.run_files import RunFiles
from vfl_core.inference.headline import Metric, task_metrics

HIDDEN_KEYS = ("secret", "token", "password")  # config values the report does not show
MAX_TRANSITION_ROWS = 200

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1050px; margin: 2em auto; padding: 0 1em;
       color: #222; line-height: 1.45; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
th, td { border: 1px solid #ddd; padding: 2px 8px; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
figure { margin: 1em 0; } figcaption { color: #555; font-size: 0.85em; }
img { max-width: 100%; height: auto; }
.muted { color: #666; }
"""


def render_html(run: RunFiles, plots: dict[str, Plot], metric: Metric) -> str:
    r = run.results
    title = f"Run {r.get('run_id', run.directory.name)}"
    parts = [
        f"<h1>{_e(title)}</h1>",
        f"<p class='muted'>{_e(str(run.directory))}</p>",
        _summary(run, metric),
        "<h2>Training</h2>",
        _figure(plots.get("curves")) or "<p>No epoch records in this run.</p>",
        f"<h2>Test {_e(metric.label)} by set of parties</h2>",
        _figure(plots.get("subsets")) or "<p>No evaluation by set of parties in this run.</p>",
        _figure(plots.get("drop_one")),
        "<h3>With every party, by observed blocks of each sample</h3>",
        _test_table(run.test_rows, _columns(run)) or "<p>No test evaluation in this run.</p>",
        "<h2>Liveness</h2>",
        _liveness(run, plots.get("liveness")),
        _serving(run),
        "<h2>Configuration</h2>",
        _config_table(run.config),
    ]
    body = "\n".join(p for p in parts if p)
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>{_e(title)}</title><style>{STYLE}</style></head>\n<body>\n{body}\n</body></html>\n"
    )


def _summary(run: RunFiles, metric: Metric) -> str:
    epochs, overall = run.epochs, next((r for r in run.test_rows if r["observed"] == "all"), None)
    facts = [f"{len(epochs)} epochs" if epochs else "no epochs recorded"]
    status = run.results.get("status")
    if isinstance(status, str) and status != "ok":
        why = run.results.get("error") or run.results.get("interrupted") or ""
        facts.insert(0, f"status: {status}" + (f" ({why})" if why else ""))
    if "rounds" in run.results:
        facts.append(f"{run.results['rounds']} rounds")
    if epochs:
        facts.append(f"{sum(float(e.get('seconds', 0)) for e in epochs):.1f}s of training")
        facts.append(f"last mean training loss {float(epochs[-1].get('mean_loss', 0)):.4f}")
    value = overall.get(metric.key) if overall is not None else None
    if overall is not None and isinstance(value, int | float):
        others = [
            f"{m.label} {m.format(float(v))}"
            for m in task_metrics(run.task)
            if m != metric and isinstance(v := overall.get(m.key), int | float)
        ]
        also = f" ({', '.join(others)})" if others else ""
        facts.append(
            f"test {metric.label} {metric.format(value)} on {overall['samples']} samples{also}"
        )
    return f"<p>{_e('; '.join(facts))}.</p>"


def _figure(plot: Plot | None) -> str:
    if plot is None:
        return ""
    data = base64.b64encode(plot.png).decode("ascii")
    return (
        f"<figure><img src='data:image/png;base64,{data}' width='{plot.width}' "
        f"height='{plot.height}' alt='{_e(plot.title)}'>"
        f"<figcaption>{_e(plot.caption)}</figcaption></figure>"
    )


def _columns(run: RunFiles) -> list[Metric]:
    """The task's metrics that some test row holds (ROC AUC only for binary tasks)."""
    return [m for m in task_metrics(run.task) if any(m.key in row for row in run.test_rows)]


def _test_table(rows: list[dict[str, Any]], metrics: list[Metric]) -> str:
    if not rows:
        return ""
    head = ["observed blocks", "samples"]
    head += [f"{m.label} %" if m.percent else m.label for m in metrics]
    body = [
        [row["observed"], row["samples"], *(_cell(m, row.get(m.key), rows) for m in metrics)]
        for row in rows
    ]
    return _table(head, body)


def _cell(metric: Metric, value: Any, rows: list[dict[str, Any]]) -> str:
    """The value as the metric is written, without a unit sign (the header has it); errors with
    the decimals of the overall value, so a column lines up."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "—"
    overall = rows[-1].get(metric.key)
    reference = float(overall) if isinstance(overall, int | float) else float(value)
    return metric.format(float(value), reference).rstrip("%")


def _liveness(run: RunFiles, plot: Plot | None) -> str:
    transitions = run.transitions
    if not transitions:
        return (
            "<p>No liveness transitions while training and evaluating: every party answered "
            "every phase in time.</p>"
        )
    rows = [
        [
            t.get("round_id"),
            t.get("at", "") if t.get("phase") == "serving" else "training",
            t.get("block"),
            f"{t.get('old')} → {t.get('new')}",
            t.get("reason"),
        ]
        for t in transitions[:MAX_TRANSITION_ROWS]
    ]
    more = len(transitions) - len(rows)
    note = f"<p class='muted'>... and {more} more (results.json)</p>" if more > 0 else ""
    counts = run.results.get("transition_counts") or {}
    total = ", ".join(f"{k} {v}" for k, v in counts.items()) if isinstance(counts, dict) else ""
    summary = f"<p>{len(transitions)} transitions" + (f": {_e(total)}" if total else "") + ".</p>"
    table = _table(["round", "when", "party", "transition", "reason"], rows)
    return summary + _figure(plot) + table + note


def _serving(run: RunFiles) -> str:
    """The serving phase: parties found down, and the evaluations and predictions served."""
    serving = run.serving
    if not serving:
        return ""
    events = [e for e in serving.get("events") or [] if isinstance(e, dict)]
    head = (
        f"<h2>After training</h2><p>Serving since {_e(str(serving.get('since', '?')))}: "
        f"{_e(str(serving.get('evaluations', 0)))} evaluations and "
        f"{_e(str(serving.get('predictions', 0)))} prediction requests.</p>"
    )
    lines = [f"<p>{_e(line)}</p>" for line in serving_lines(run)]
    rows = [
        [
            e.get("at"),
            e.get("kind"),
            e.get("split"),
            e.get("samples"),
            ",".join(map(str, e.get("live_blocks") or [])) or "none",
            ",".join(map(str, e.get("missing") or [])) or "—",
        ]
        for e in events
    ]
    table = _table(["when", "call", "split", "samples", "answered", "without"], rows)
    dropped = serving.get("events_dropped") or 0
    note = f"<p class='muted'>... and {dropped} more (counted only)</p>" if dropped else ""
    return head + "".join(lines) + (table if rows else "") + note


def serving_lines(run: RunFiles) -> list[str]:
    """One line per party found down while serving: when, why, and what ran without it."""
    events = [e for e in (run.serving.get("events") or []) if isinstance(e, dict)]
    lines = []
    for t in run.transitions:
        if t.get("phase") != "serving" or t.get("new") != "down":
            continue
        block = t.get("block")
        without = [e for e in events if block in (e.get("missing") or [])]
        kinds = sorted({str(e.get("kind")) for e in without})
        lines.append(
            f"party of block {block} down while serving at {t.get('at')} ({t.get('reason')}); "
            f"{len(without)} call(s) served without it"
            + (f" ({', '.join(kinds)})" if kinds else "")
        )
    return lines


def _config_table(config: dict[str, Any]) -> str:
    if not config:
        return "<p>No configuration recorded.</p>"
    return _table(["setting", "value"], [[k, v] for k, v in _flatten(config)])


def _flatten(config: dict[str, Any], prefix: str = "") -> Iterable[tuple[str, str]]:
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            yield from _flatten(value, name + ".")
        elif any(word in key.lower() for word in HIDDEN_KEYS):
            yield name, "(hidden)"
        elif isinstance(value, list):
            yield name, ", ".join(map(str, value)) if value else "[]"
        else:
            yield name, "—" if value is None else str(value)


def _table(head: list[str], rows: Iterable[list[Any]]) -> str:
    def cell(value: Any) -> str:
        numeric = isinstance(value, int | float) or _is_number(str(value))
        return f"<td class='num'>{_e(str(value))}</td>" if numeric else f"<td>{_e(str(value))}</td>"

    header = "".join(f"<th>{_e(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(cell(v) for v in row) + "</tr>\n" for row in rows)
    return f"<table><thead><tr>{header}</tr></thead><tbody>\n{body}</tbody></table>"


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _e(text: str) -> str:
    return html.escape(text, quote=True)
