"""`vfl report RUN_DIR`: a self-contained HTML report of a run, with its figures as PNG files.

RUN_DIR is a coordinator's `--out` (the demo's is runs/demo/run) or `vfl simulate --run-dir`.
The report shows the training curves, the test metric for every evaluated set of parties as a
heat map, the effect of dropping each party, the liveness transitions and the run's config.
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from vfl_cli.errors import setup_logging, user_errors
from vfl_core.errors import ConfigError, VflError

if TYPE_CHECKING:  # numpy, matplotlib and torch: imported when a report is written
    from vfl_cli.report_plots import Plot
    from vfl_cli.run_files import RunFiles
    from vfl_core.inference.headline import Metric

log = logging.getLogger(__name__)

REPORT_FILE = "report.html"


class MissingExtraError(VflError):
    """An optional dependency of a command is not installed."""


def has_matplotlib() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


@user_errors
def report(
    run_dir: Annotated[Path, typer.Argument(help="a coordinator's --out or simulate --run-dir")],
    out: Annotated[
        Path | None, typer.Option(help="where report.html and the PNGs go (default RUN_DIR/report)")
    ] = None,
    metric: Annotated[
        str | None,
        typer.Option(
            help="classification: accuracy (default) | federation_accuracy | f1 | auc | brier "
            "(binary); "
            "regression: rmse (default) | mae | r2 | federation_rmse"
        ),
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug | info | warning | error")] = "warning",
) -> None:
    """Write RUN_DIR/report/report.html: curves, metric by set of parties, config."""
    setup_logging(log_level)
    from vfl_cli.report_html import serving_lines
    from vfl_cli.run_files import load_run

    path = write_report(run_dir, out if out is not None else run_dir / "report", metric)
    run = load_run(run_dir)
    status = run.results.get("status")
    if isinstance(status, str) and status != "ok":
        why = run.results.get("error") or run.results.get("interrupted") or ""
        typer.echo(
            f"status: {status}" + (f": {why}" if why else "") + f"; {len(run.epochs)} epochs"
        )
    for line in serving_lines(run):
        typer.echo(line)
    typer.echo(f"report written to {path}")


def write_report(run_dir: Path, out: Path, metric_name: str | None = None) -> Path:
    """Draw the figures, write them as PNG files and embedded in `out`/report.html. The metric
    is the run's headline (accuracy, or RMSE for regression) unless `metric_name` says."""
    from vfl_cli.report_html import render_html
    from vfl_cli.run_files import load_run
    from vfl_core.inference.headline import METRICS, choose_metric

    if metric_name is not None and metric_name not in METRICS:
        raise ConfigError(f"--metric must be one of {', '.join(METRICS)}, not {metric_name!r}")
    if not has_matplotlib():
        raise MissingExtraError(
            "vfl report needs matplotlib: pip install 'laser-vfl[report]' (or matplotlib)"
        )
    run = load_run(run_dir)
    metric = choose_metric(run.task, metric_name, run.has_auc, run.has_brier)
    plots = draw_plots(run, metric)
    out.mkdir(parents=True, exist_ok=True)
    for plot in plots.values():
        (out / f"{plot.name}.png").write_bytes(plot.png)
    path = out / REPORT_FILE
    path.write_text(render_html(run, plots, metric), encoding="utf-8")
    log.info("report of %s: %d figures in %s", run_dir, len(plots), path)
    return path


def draw_plots(run: RunFiles, metric: Metric) -> dict[str, Plot]:
    from vfl_cli.report_plots import curves_plot, drop_one_plot, liveness_plot, subsets_plot
    from vfl_core.inference.headline import task_metrics

    parties = sorted({int(b) for s in run.subsets for b in s["blocks"]})
    parties = parties or sorted({int(t["block"]) for t in run.transitions})
    end = int(run.results.get("rounds") or 0)
    drawn = [
        curves_plot(run.epochs, [metric, *(m for m in task_metrics(run.task) if m != metric)]),
        subsets_plot(run.subsets, metric),
        drop_one_plot(run.subsets, metric),
        liveness_plot(run.transitions, parties, end),
    ]
    return {p.name: p for p in drawn if p is not None}
