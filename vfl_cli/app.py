"""The `vfl` typer app, assembled from one module per command."""

from __future__ import annotations

import typer

from vfl_cli.bench_cmd import bench_app
from vfl_cli.bench_privacy import privacy as _privacy  # noqa: F401  (registers `vfl bench privacy`)
from vfl_cli.bench_suites import paper_app as _paper  # noqa: F401 (registers paper, scale, dvfl, dlvm)
from vfl_cli.bench_wan import wan as _wan  # noqa: F401 (registers `vfl bench wan`)
from vfl_cli.certs_cmd import certs
from vfl_cli.command import VflGroup, vfl_commands
from vfl_cli.compose_cmd import compose
from vfl_cli.demo_cmd import demo
from vfl_cli.errors import user_errors
from vfl_cli.export_cmd import export
from vfl_cli.health_cmd import health
from vfl_cli.prepare_cmd import prepare
from vfl_cli.remote_cmd import evaluate, predict
from vfl_cli.report_cmd import report
from vfl_cli.simulate_cmd import simulate

app = typer.Typer(
    cls=VflGroup, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False
)
app.command("prepare")(user_errors(prepare))
app.command("simulate")(simulate)
app.command("demo")(demo)
app.command("evaluate")(evaluate)
app.command("predict")(predict)
app.command("certs")(certs)
app.command("compose")(user_errors(compose))
app.command("health")(health)
app.command("export")(user_errors(export))
app.command("report")(report)
app.add_typer(bench_app, name="bench")
vfl_commands(app)


def main() -> None:
    app()
