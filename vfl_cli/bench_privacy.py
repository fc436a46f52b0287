"""`vfl bench privacy`: the label-leak meter (benchmarks/privacy/), its options passed on."""

from __future__ import annotations

import typer

from vfl_cli.bench_cmd import bench_app
from vfl_cli.bench_options import bench_module


@bench_app.command(
    "privacy",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)
def privacy(ctx: typer.Context) -> None:
    """Label leakage at each feature-only party and the coordinator, per defence (the options
    of benchmarks/privacy/; --help lists them); writes privacy.md."""
    bench_module("privacy").main(list(ctx.args))
