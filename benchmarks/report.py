"""What the benchmarks' reports share: markdown tables, notes kept across rewrites of a report,
and PNG plots (matplotlib with the Agg backend, optional)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def kept_notes(path: Path, heading: str) -> str:
    """The hand-written part of a generated report: from the line `heading` to the end of the
    file as it is now ("" if there is none), for the report's rewrite to keep."""
    try:
        old = path.read_text()
    except FileNotFoundError:
        return ""
    start = old.find("\n" + heading + "\n")
    return "" if start < 0 else old[start + 1 :]


def md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    return lines + ["| " + " | ".join(r) + " |" for r in rows]


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend, or None (with a warning) if not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed (pip install 'laser-vfl[bench]'): no plot")
        return None
    return plt


def save_figure(plt: Any, fig: Any, out: Path) -> Path:
    """Write a finished figure as PNG and close it."""
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def write_job_report(
    path: Path,
    found: Any,
    plot: Any,  # (found, png path) -> the png written, or None without matplotlib
    markdown: Any,  # (found, png file name or None) -> the report's text
) -> tuple[Path, str]:
    """A benchmark's report and its plot beside it, from the runs it found."""
    png = plot(found, path.with_suffix(".png"))
    text = markdown(found, png.name if png else None)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path, text
