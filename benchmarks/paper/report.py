"""The accuracy grid's report: markdown tables beside the paper's and a PNG plot."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.setups import METHOD_NAMES, P_MISS, Setup, md_table, metric_label, pyplot

log = logging.getLogger(__name__)

Columns = list[tuple[float, float]]
CellKey = tuple[str, float, float]  # (method, train p_miss, test p_miss)


@dataclass(frozen=True)
class Stat:
    mean: float
    std: float  # sample standard deviation (ddof 1); 0 for a single seed
    n: int


@dataclass(frozen=True)
class AccuracyContext:
    """What the accuracy report says about how it was made."""

    command: str
    machine: dict[str, Any]
    methods: Sequence[str]
    seeds: Sequence[int]
    p_train: Sequence[float] = P_MISS
    p_test: Sequence[float] = P_MISS
    epochs: int | None = None
    digest: str = ""
    run_commands: Sequence[str] = ()  # the commands that produced the cached runs


def columns(ctx: AccuracyContext) -> Columns:
    return [(a, b) for a in ctx.p_train for b in ctx.p_test]


def _col(c: tuple[float, float]) -> str:
    return f"{c[0]:g}/{c[1]:g}"


def _cell(stat: Stat | None) -> str:
    if stat is None:
        return "—"
    return f"{stat.mean:.1f} ± {stat.std:.1f} ({stat.n})"


def ours_table(stats: dict[CellKey, Stat], ctx: AccuracyContext) -> list[str]:
    cols = columns(ctx)
    rows = [
        [METHOD_NAMES.get(m, m), *(_cell(stats.get((m, *c))) for c in cols)] for m in ctx.methods
    ]
    return md_table(["method", *map(_col, cols)], rows)


def paper_tables(stats: dict[CellKey, Stat], setup: Setup, ctx: AccuracyContext) -> list[str]:
    """The paper's numbers, and ours minus the paper's."""
    cols = columns(ctx)
    paper, diff = [], []
    for m in ctx.methods:
        ref = setup.paper.get(m, {})
        paper.append([METHOD_NAMES.get(m, m), *(_fmt(ref.get(c)) for c in cols)])
        cells = []
        for c in cols:
            stat, want = stats.get((m, *c)), ref.get(c)
            cells.append("—" if stat is None or want is None else f"{stat.mean - want:+.1f}")
        diff.append([METHOD_NAMES.get(m, m), *cells])
    header = ["method", *map(_col, cols)]
    return [
        f"### The paper's numbers ({setup.paper_source})",
        "",
        *md_table(header, paper),
        "",
        "### Ours minus the paper's (mean)",
        "",
        *md_table(header, diff),
    ]


def disagreements(
    stats: dict[CellKey, Stat], setup: Setup, ctx: AccuracyContext, points: float = 3.0
) -> list[str]:
    """Cells where our mean is more than `points` (and two stds) away from the paper's."""
    out = []
    for m in ctx.methods:
        for c in columns(ctx):
            stat, want = stats.get((m, *c)), setup.paper.get(m, {}).get(c)
            if stat is None or want is None:
                continue
            gap = stat.mean - want
            if abs(gap) > max(points, 2 * stat.std):
                out.append(f"{METHOD_NAMES.get(m, m)} {_col(c)}: {gap:+.1f}")
    return out


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def checks(stats: dict[CellKey, Stat], setup: Setup, ctx: AccuracyContext) -> list[str]:
    """The issue's acceptance criteria, evaluated on the cells we have."""
    lines = []
    for c in columns(ctx):
        laser = stats.get(("laser", *c))
        others = [(m, stats.get((m, *c))) for m in ctx.methods if m != "laser"]
        others = [(m, s) for m, s in others if s is not None]
        if laser is None or not others:
            lines.append(f"- {_col(c)}: not enough cells yet")
            continue
        best_m, best = max(others, key=lambda ms: ms[1].mean)
        gap = laser.mean - best.mean
        margin = gap + best.std  # "within one standard deviation of the best": the best's std
        verdict = "ok" if margin >= 0 else "**LASER-VFL below the best other by more than its std**"
        lines.append(
            f"- {_col(c)}: LASER-VFL {laser.mean:.2f} vs best other "
            f"{METHOD_NAMES.get(best_m, best_m)} {best.mean:.2f} (gap {gap:+.2f}, "
            f"std {laser.std:.2f}/{best.std:.2f}, margin {margin:+.2f}, "
            f"seeds {laser.n}/{best.n}): {verdict}"
        )
    if setup.dataset == "credit":
        base = stats.get(("laser", 0.0, 0.0))
        if base is not None:
            lines.append(f"- LASER-VFL at 0/0: {base.mean:.1f} (acceptance: >= 44)")
        for p in ctx.p_train:
            svfl = stats.get(("svfl", p, 0.5))
            if svfl is not None:
                lines.append(
                    f"- Standard VFL at {p:g}/0.5: {svfl.mean:.1f} (acceptance: <= 35, collapse)"
                )
    return lines


def missing_runs(stats: dict[CellKey, Stat], ctx: AccuracyContext) -> list[str]:
    need = len(ctx.seeds)
    short = []
    for m in ctx.methods:
        for p in ctx.p_train:
            have = stats.get((m, p, ctx.p_test[0]))
            n = 0 if have is None else have.n
            if n < need:
                short.append(f"{METHOD_NAMES.get(m, m)} train {p:g}: {n}/{need} seeds")
    return short


def accuracy_markdown(
    stats: dict[CellKey, Stat], setup: Setup, ctx: AccuracyContext, plot_name: str | None
) -> str:
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    m = ctx.machine
    lines = [
        f"# Accuracy grid: {setup.dataset} (the paper's Table 1 layout)",
        "",
        f"Metric: {metric_label(setup)}, of the `all` row (every test sample). Cells: mean ± "
        "sample std (ddof 1) over seeds, with the number of seeds in parentheses; columns are "
        "train p_miss / test p_miss; every test p_miss is evaluated after the same training run.",
        "`—` marks a cell with no finished run yet.",
        "",
        *(f"- Runs made by: `{c}`" for c in ctx.run_commands),
        f"- This report written by: `{ctx.command}`",
        f"- Written: {now}; setup digest `{ctx.digest}` (run files "
        f"`runs/{setup.dataset}/*-{ctx.digest}.json` beside this file)",
        f"- Machine: {m.get('cores')}-core CPU ({m.get('cpu')}), "
        f"{'a GPU' if m.get('gpu') else 'no GPU'}, torch {m.get('torch')}, one torch thread "
        "per run, runs niced and shared with other work (timings are not comparable).",
        f"- Setup: {setup.notes}",
        f"- Seeds requested: {', '.join(map(str, ctx.seeds))}",
        "",
        "## Ours",
        "",
        *ours_table(stats, ctx),
        "",
    ]
    if plot_name:
        lines += [f"![{setup.dataset} grid]({plot_name})", ""]
    if setup.paper:
        lines += [*paper_tables(stats, setup, ctx), ""]
        far = disagreements(stats, setup, ctx)
        lines += [
            "### Where we disagree with the paper",
            "",
            "Cells more than 3 points (and two stds) from the paper: "
            + ("; ".join(far) if far else "none so far")
            + ".",
            "",
            *setup.differences,
            "",
        ]
    else:
        lines += [
            "The paper's numbers for this data set are not in our files "
            "(shared/data/README.md has only Credit), so there is no side-by-side comparison.",
            "",
            *setup.differences,
            "",
        ]
    lines += [
        "## Acceptance checks on the recorded cells",
        "",
        "A column passes when LASER-VFL's mean is at least the best other method's mean minus "
        "that method's sample std; margin = LASER-VFL - (best - its std).",
        "",
        *checks(stats, setup, ctx),
        "",
    ]
    short = missing_runs(stats, ctx)
    lines += ["## Missing runs", ""]
    lines += [f"- {s}" for s in short] if short else ["None: every cell has every seed."]
    return "\n".join(lines) + "\n"


def accuracy_plot(
    stats: dict[CellKey, Stat], setup: Setup, ctx: AccuracyContext, out: Path
) -> Path | None:
    """One panel per train p_miss: metric against test p_miss, a line per method."""
    plt = pyplot()
    if plt is None:
        return None
    fig, axes = plt.subplots(1, len(ctx.p_train), figsize=(4.2 * len(ctx.p_train), 3.8))
    axes = list(axes) if len(ctx.p_train) > 1 else [axes]
    for ax, p in zip(axes, ctx.p_train, strict=True):
        for i, m in enumerate(ctx.methods):
            color = f"C{i}"
            pts = [(q, stats.get((m, p, q))) for q in ctx.p_test]
            pts = [(q, s) for q, s in pts if s is not None]
            if pts:
                ax.errorbar(
                    [q for q, _ in pts],
                    [s.mean for _, s in pts],
                    yerr=[s.std for _, s in pts],
                    marker="o",
                    capsize=3,
                    color=color,
                    label=METHOD_NAMES.get(m, m),
                )
            ref = [(q, setup.paper.get(m, {}).get((p, q))) for q in ctx.p_test]
            ref = [(q, v) for q, v in ref if v is not None]
            if ref:
                ax.plot(*zip(*ref, strict=True), ls="--", alpha=0.45, color=color)
        ax.set_title(f"train p_miss {p:g}")
        ax.set_xlabel("test p_miss")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("F1 x 100" if setup.metric == "f1" else "accuracy %")
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8)
    title = f"{setup.dataset}: ours (solid, mean ± std over seeds)"
    fig.suptitle(title + (" and the paper (dashed)" if setup.paper else ""), fontsize=10)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
