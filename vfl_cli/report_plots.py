"""The figures of `vfl report`, drawn with matplotlib on the Agg backend into PNG bytes.

Each function takes the plain records of a run directory (vfl_cli.run_files) and returns a
`Plot`, or None when the run has nothing to draw for it. Figures are saved at a fixed size (no
tight bounding box), so the PNG's pixel size is the figure size times DPI.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

import numpy as np

from vfl_core.inference.headline import Metric

DPI = 100
STATE_COLOURS = {"up": "#4caf50", "down": "#e53935", "rejoining": "#fb8c00"}


@dataclass(frozen=True)
class Plot:
    name: str  # file stem, e.g. "subsets"
    title: str
    caption: str
    png: bytes
    width: int  # pixels
    height: int


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend (ImportError when matplotlib is missing)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, name: str, title: str, caption: str) -> Plot:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    width, height = (round(x * DPI) for x in fig.get_size_inches())
    pyplot().close(fig)
    return Plot(name, title, caption, buf.getvalue(), width, height)


def curves_plot(epochs: list[dict[str, Any]], metrics: list[Metric]) -> Plot | None:
    """Training loss per head party by epoch; beside it, if evaluated, the test `metrics` by
    epoch that share the unit of the first (the headline: the %s, or the errors in the
    target's units)."""
    if not epochs:
        return None
    tested = [e for e in epochs if isinstance(e.get("test"), dict)]
    plt = pyplot()
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, 2 if tested else 1, figsize=(10 if tested else 6, 3.8))
    loss_ax = axes[0] if tested else axes
    x = [e["epoch"] + 1 for e in epochs]
    heads = sorted({int(k) for e in epochs for k in (e.get("head_losses") or {})})
    for head in heads:
        ys = [(e.get("head_losses") or {}).get(str(head), float("nan")) for e in epochs]
        loss_ax.plot(x, ys, lw=1.4, label=f"party {head}")
    loss_ax.plot(x, [e.get("mean_loss", float("nan")) for e in epochs], "k--", lw=1, label="mean")
    loss_ax.set(xlabel="epoch", ylabel="training loss (sampled LASER loss)")
    loss_ax.set_title("training loss per head party", fontsize=10)
    loss_ax.grid(alpha=0.3)
    loss_ax.legend(fontsize=8)
    loss_ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if tested:
        ax = axes[1]
        tx = [e["epoch"] + 1 for e in tested]
        for metric in [m for m in metrics if m.unit == metrics[0].unit]:
            ys = [e["test"].get(metric.key) for e in tested]
            if any(isinstance(y, int | float) for y in ys):
                ax.plot(tx, [_shown(metric, y) for y in ys], "o-", ms=3, label=metric.label)
        ax.set(xlabel="epoch", ylabel=metrics[0].unit)
        ax.set_title("test metrics (every party)", fontsize=10)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    caption = "Mean sampled loss of each head party's rounds per epoch (dashed: all heads)."
    if tested:
        caption += " Right: the test split evaluated during training."
    return _save(fig, "curves", "Training curves", caption)


def subsets_plot(subsets: list[dict[str, Any]], metric: Metric) -> Plot | None:
    """Heat map: a row per evaluated set of parties, a column per party; member cells carry the
    colour of the set's test metric, the value is written at the right. Better is yellow for
    every metric: the colour scale is reversed for errors (lower is better)."""
    if not subsets:
        return None
    fig = subsets_figure(subsets, metric)
    caption = (
        f"Test {metric.label} when only the coloured parties are called (grey: left out). "
        "Samples that none of them holds are unscored."
    )
    if metric.lower_is_better:
        caption += f" Lower is better: the lowest {metric.label} is yellow."
    return _save(fig, "subsets", f"Test {metric.label} by set of parties", caption)


def subsets_figure(subsets: list[dict[str, Any]], metric: Metric) -> Any:
    """The heat map's matplotlib figure (subsets_plot's), before it is saved."""
    plt = pyplot()
    parties, values, grid = _subset_grid(subsets, metric)
    scored = values[~np.isnan(values)]
    reference = float(np.median(scored)) if len(scored) else 0.0
    notes = [_subset_note(s, metric, reference) for s in subsets]
    # the notes are the right-hand axis' labels, so the layout keeps the colour bar clear of
    # them however long they are (text drawn beside the axes ran under the bar)
    width = 2.8 + 0.75 * len(parties) + 0.065 * max(len(n) for n in notes)
    fig, ax = plt.subplots(figsize=(width, 1.4 + 0.3 * len(subsets)), layout="constrained")
    colours = "viridis_r" if metric.lower_is_better else "viridis"
    cmap = plt.get_cmap(colours).with_extremes(bad="#eeeeee")  # grey: party left out
    lo, hi = (float(scored.min()), float(scored.max())) if len(scored) else (0.0, 100.0)
    image = ax.imshow(
        np.ma.masked_invalid(grid), cmap=cmap, vmin=lo, vmax=max(hi, lo + 1e-6), aspect="auto"
    )
    ax.set_xticks(range(len(parties)), [f"party {b}" for b in parties], fontsize=8)
    ax.xaxis.tick_top()
    ax.set_yticks(
        range(len(subsets)),
        ["{" + ",".join(map(str, s["blocks"])) + "}" for s in subsets],
        fontsize=8,
    )
    ax.set_xticks(np.arange(-0.5, len(parties)), minor=True)
    ax.set_yticks(np.arange(-0.5, len(subsets)), minor=True)
    ax.grid(which="minor", color="white", lw=1.5)
    ax.tick_params(which="minor", length=0)
    right = ax.secondary_yaxis("right")
    right.set_yticks(range(len(subsets)), notes, fontsize=8)
    right.tick_params(length=0)
    bar = fig.colorbar(image, ax=ax, label=_scale_label(metric), pad=0.04, fraction=0.08)
    if metric.lower_is_better:
        bar.ax.invert_yaxis()  # better (lower) at the top, as for the other metrics
    ax.set_ylabel("parties called")
    fig.suptitle(f"test {metric.label} with only the coloured parties", fontsize=10)
    return fig


def _subset_note(entry: dict[str, Any], metric: Metric, reference: float) -> str:
    """The value written beside a set's row: its metric, how many samples went unscored."""
    value = _metric(entry, metric)
    note = "nothing scored" if value is None else metric.format(value, reference)
    unscored = entry.get("unscored") and entry.get("samples")
    return note + (f" ({entry['unscored']} unscored)" if unscored else "")


def _scale_label(metric: Metric) -> str:
    label = f"test {metric.label} ({metric.unit})"
    return label + ", lower is better" if metric.lower_is_better else label


def _metric(entry: dict[str, Any], metric: Metric) -> float | None:
    """The metric of a test row or subset, None when it scored nothing or lacks it."""
    value = entry.get(metric.key)
    if not entry.get("samples") or isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _shown(metric: Metric, value: Any) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return metric.shown(float(value)) if ok else float("nan")


def _subset_grid(
    subsets: list[dict[str, Any]], metric: Metric
) -> tuple[list[int], np.ndarray, np.ndarray]:
    """The parties, each set's metric as shown (NaN: no sample scored) and the (sets, parties)
    grid holding the set's metric where the party is a member and NaN elsewhere."""
    parties = sorted({int(b) for s in subsets for b in s["blocks"]})
    values = np.array([_shown(metric, _metric(s, metric)) for s in subsets])  # (sets,)
    grid = np.full((len(subsets), len(parties)), np.nan)  # (sets, parties)
    for i, s in enumerate(subsets):
        for b in s["blocks"]:
            grid[i, parties.index(int(b))] = values[i]
    return parties, values, grid


def drop_one_plot(subsets: list[dict[str, Any]], metric: Metric) -> Plot | None:
    """Bar per party: how the test metric changes when that party alone is left out (red:
    worse, so up for errors and down for accuracy)."""
    full = max(subsets, key=lambda s: len(s["blocks"]), default=None)
    with_all = _metric(full, metric) if full is not None else None
    if full is None or len(full["blocks"]) < 2 or with_all is None:
        return None
    members = set(full["blocks"])
    bars = []
    for drop in sorted(members):
        rest = next((s for s in subsets if set(s["blocks"]) == members - {drop}), None)
        value = _metric(rest, metric) if rest is not None else None
        if value is not None:
            bars.append((drop, value - with_all))
    if not bars:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(1.8 + 0.9 * len(bars), 3.4))
    deltas = [metric.shown(d) for _, d in bars]
    colours = ["#e53935" if metric.worse(d) else "#43a047" for _, d in bars]
    rects = ax.bar([f"party {b}" for b, _ in bars], deltas, color=colours)
    places = metric.places(with_all)
    ax.bar_label(rects, fmt=f"%+.{places}f", fontsize=8, padding=2)
    ax.axhline(0, color="black", lw=0.8)
    # at least a point of room for %; in other units, room for the largest bar
    span = max(1.0 if metric.percent else 10.0**-places, *(abs(d) for d in deltas))
    ax.set_ylim(min(0.0, *deltas) - 0.25 * span, max(0.0, *deltas) + 0.25 * span)
    unit = "points" if metric.percent else metric.unit
    ax.set_ylabel(f"change in test {metric.label} ({unit})")
    ax.set_title(f"without one party (all: {metric.format(with_all)})", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    caption = f"Test {metric.label} without each party minus with every party"
    caption += " (red: worse; lower is better)." if metric.lower_is_better else " (red: worse)."
    return _save(fig, "drop_one", "The effect of dropping each party", caption)


def liveness_plot(transitions: list[dict[str, Any]], parties: list[int], end: int) -> Plot | None:
    """Each party's state (up, down, rejoining) along the liveness clock (rounds + requests)."""
    if not transitions or not parties:
        return None
    plt = pyplot()
    end = max(end, *(int(t["round_id"]) + 1 for t in transitions))
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.45 * len(parties)))
    for row, block in enumerate(parties):
        for state, start, stop in _spans([t for t in transitions if int(t["block"]) == block], end):
            colour = STATE_COLOURS.get(state, "grey")
            ax.broken_barh([(start, stop - start)], (row - 0.35, 0.7), color=colour, lw=0)
    ax.set_yticks(range(len(parties)), [f"party {b}" for b in parties], fontsize=8)
    ax.invert_yaxis()  # party 0 on top
    ax.set_xlim(0, end)
    ax.set_xlabel("round (liveness clock: training rounds and inference batches)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in STATE_COLOURS.values()]
    ax.legend(
        handles,
        list(STATE_COLOURS),
        ncol=3,
        fontsize=8,
        loc="upper center",
        bbox_to_anchor=(0.5, 1.25),
        frameon=False,
    )
    fig.tight_layout()
    caption = "When the coordinator marked parties down, rejoining and up again."
    return _save(fig, "liveness", "Liveness transitions", caption)


def _spans(transitions: list[dict[str, Any]], end: int) -> list[tuple[str, int, int]]:
    """(state, first round, end round) of one party, adjacent equal states merged (a party that
    rejoins and answers in the same round never shows as rejoining)."""
    spans: list[tuple[str, int, int]] = []
    state, start = "up", 0
    for t in [*transitions, {"new": None, "round_id": end}]:
        at = int(t["round_id"])
        if at > start:
            if spans and spans[-1][0] == state:
                spans[-1] = (state, spans[-1][1], at)
            else:
                spans.append((state, start, at))
            start = at
        state = str(t["new"])
    return spans
