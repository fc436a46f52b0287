"""`vfl report RUN_DIR` on run directories written by real short runs (`vfl simulate --run-dir`
in process; a real coordinator with four vfl-client processes in the slow test): one HTML file
with the figures embedded as PNGs that decode at their stated size, and the run's config; bad
run directories exit 2 with one error line naming the file."""

from __future__ import annotations

import base64
import importlib.util
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from harness import Cluster
from typer.testing import CliRunner

from vfl_cli import report_cmd
from vfl_cli.app import app

HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None  # the `report` extra
needs_matplotlib = pytest.mark.skipif(not HAS_MATPLOTLIB, reason="matplotlib is not installed")

FAST = ["--representation", "mlp", "--hidden", "8", "--embed-dim", "4", "--batch-size", "128"]
FAST += ["--no-progress", "--threads", "1", "--seed", "0"]
IMG = re.compile(r"<img src='data:image/png;base64,([A-Za-z0-9+/=]+)' width='(\d+)' height='(\d+)'")


# The commands configure the root logger and torch's thread count process-wide (conftest.py).
pytestmark = pytest.mark.usefixtures("restore_process_state")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-epoch digits simulation with injected party failures (so liveness transitions) and a
    test evaluation after every epoch."""
    root = tmp_path_factory.mktemp("report")
    threads = torch.get_num_threads()
    args = ["simulate", "--epochs", "2", "--p-miss", "0.1", "--eval-every", "1", *FAST]
    args += ["--fault-rate", "0.05", "--rejoin-rate", "0.5", "--log-level", "error"]
    args += ["--run-dir", str(root / "run"), "--out", str(root / "sim.json")]
    result = CliRunner().invoke(app, args)
    torch.set_num_threads(threads)
    assert result.exit_code == 0, result.output
    assert f"see it with `vfl report {root / 'run'}`" in result.stdout
    # the JSON result keeps its layout and gains the subsets; the table the drop-one lines
    sim = json.loads((root / "sim.json").read_text())
    run = json.loads((root / "run" / "results.json").read_text())
    assert sim["results"][0]["rows"] == run["test"]["rows"]
    assert sim["results"][0]["subsets"] == run["subsets"]
    for k in range(4):
        assert f"without party {k}: accuracy" in result.stdout
    return root / "run"


def invoke(*args: str):
    return CliRunner().invoke(app, ["report", *args])


def images(html: str) -> list[tuple[bytes, int, int]]:
    return [(base64.b64decode(m[1]), int(m[2]), int(m[3])) for m in IMG.finditer(html)]


def assert_pngs_decode_at_stated_size(html: str, out: Path, names: set[str]) -> None:
    from PIL import Image

    embedded = images(html)
    assert len(embedded) == len(names)
    files = {p.stem: p.read_bytes() for p in out.glob("*.png")}
    assert set(files) == names
    for png, width, height in embedded:
        with Image.open(io.BytesIO(png)) as image:
            image.load()  # decodes every pixel
            assert image.format == "PNG" and image.size == (width, height)
        assert png in files.values()  # the same figure is also written beside the report


def assert_user_error(result, needle: str) -> None:
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and needle in lines[0], lines[0]


# ---------------------------------------------------------------- success


@needs_matplotlib
def test_given_simulated_run_when_reporting_then_html_embeds_every_figure_and_the_config(
    run_dir: Path, tmp_path: Path
) -> None:
    results = json.loads((run_dir / "results.json").read_text())
    assert results["transitions"], "the injected faults should have moved some party"
    assert len(results["subsets"]) == 15
    out = tmp_path / "report"
    result = invoke(str(run_dir), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"report written to {out / 'report.html'}"
    html = (out / "report.html").read_text()
    assert_pngs_decode_at_stated_size(html, out, {"curves", "subsets", "drop_one", "liveness"})
    assert "<script" not in html and "http" not in html  # self-contained
    # the config as a table: dotted names and values; the federation secret is not shown
    assert "<td>train.epochs</td><td class='num'>2</td>" in html
    assert "<td>train.model.embed_dim</td><td class='num'>4</td>" in html
    assert "<td>p_miss_train</td><td class='num'>0.1</td>" in html
    assert "<td>secret</td><td>(hidden)</td>" in html and results["config"]["secret"] not in html
    # the test table and the summary carry the run's numbers
    overall = results["test"]["rows"][-1]
    assert f"test accuracy {100 * overall['accuracy']:.2f}% on {overall['samples']}" in html
    assert f"{len(results['transitions'])} transitions" in html


@needs_matplotlib
def test_given_run_without_epoch_log_or_transitions_when_reporting_then_figures_it_can_draw(
    run_dir: Path, tmp_path: Path
) -> None:
    """An older run directory: epochs only in results.json, no subsets, no transitions."""
    old = tmp_path / "old"
    old.mkdir()
    results = json.loads((run_dir / "results.json").read_text())
    results.update(subsets=[], transitions=[], transition_counts={})
    (old / "results.json").write_text(json.dumps(results))
    result = invoke(str(old))
    assert result.exit_code == 0, result.output
    html = (old / "report" / "report.html").read_text()
    assert_pngs_decode_at_stated_size(html, old / "report", {"curves"})
    assert "No evaluation by set of parties in this run." in html
    assert "No liveness transitions" in html


# ---------------------------------------------------------------- bad run directories


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ('{"run_id": "x", "test": ', "results.json: not valid JSON (line 1"),
        ("[1, 2]", "results.json: expected a JSON object, found list"),
        ('{"subsets": [{"blocks": 3}]}', "results.json: subsets[0] has no list of blocks"),
        ('{"subsets": [{"blocks": [0], "samples": 3}]}', "subsets[0].accuracy is not a number"),
        ('{"test": {"rows": [{"observed": "all"}]}}', "test.rows[0].samples is not a number"),
    ],
)
def test_given_corrupt_results_when_reporting_then_exit_2_and_one_line_naming_the_file(
    tmp_path: Path, content: str, needle: str
) -> None:
    (tmp_path / "results.json").write_text(content)
    assert_user_error(invoke(str(tmp_path)), needle)
    assert not (tmp_path / "report").exists()


def test_given_corrupt_epoch_line_when_reporting_then_exit_2_naming_file_and_line(
    run_dir: Path, tmp_path: Path
) -> None:
    (tmp_path / "results.json").write_text((run_dir / "results.json").read_text())
    good = (run_dir / "epochs.jsonl").read_text().splitlines()[0]
    (tmp_path / "epochs.jsonl").write_text(f"{good}\nnot json\n")
    assert_user_error(invoke(str(tmp_path)), "epochs.jsonl line 2: not valid JSON")


def test_given_missing_run_dir_or_results_when_reporting_then_exit_2_naming_it(
    tmp_path: Path,
) -> None:
    assert_user_error(invoke(str(tmp_path / "nope")), f"{tmp_path / 'nope'}: no such run")
    assert_user_error(invoke(str(tmp_path)), f"{tmp_path / 'results.json'}: not found")


def test_given_no_matplotlib_when_reporting_then_exit_2_naming_the_extra(
    run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(report_cmd, "has_matplotlib", lambda: False)
    result = invoke(str(run_dir), "--out", str(tmp_path / "r"))
    assert_user_error(result, "pip install 'laser-vfl[report]'")


def test_given_unknown_metric_when_reporting_then_exit_2_naming_the_option(run_dir: Path) -> None:
    assert_user_error(invoke(str(run_dir), "--metric", "acc"), "--metric must be one of")
    # known metrics that this 10-class run does not have
    assert_user_error(invoke(str(run_dir), "--metric", "auc"), "--metric auc: this run has no ROC")
    result = invoke(str(run_dir), "--metric", "rmse")
    assert_user_error(result, "--metric rmse is for regression; this classification run has")


def test_given_bad_eval_every_when_simulating_then_exit_2_naming_the_option(
    tmp_path: Path,
) -> None:
    result = CliRunner().invoke(app, ["simulate", "--eval-every", "-1", "--run-dir", str(tmp_path)])
    assert_user_error(result, "--eval-every must be 0 or more")
    result = CliRunner().invoke(app, ["simulate", "--eval-every", "2"])
    assert_user_error(result, "--eval-every writes to epochs.jsonl: give a --run-dir")


# ---------------------------------------------------------------- a real federation


@pytest.mark.slow
@needs_matplotlib
def test_given_real_federation_run_when_reporting_then_epoch_log_subsets_and_report(
    tmp_path: Path, party_dirs: list[Path]
) -> None:
    """On the session's digits directories (conftest's `party_dirs`, the same `vfl prepare`
    options), not a `vfl prepare` of its own."""
    with Cluster(tmp_path / "cluster") as cluster:
        coord, _ = cluster.federation(
            party_dirs, epochs=2, deadline=5.0, extra=["--eval-every", "1", *FAST[:8]]
        )
        assert coord.wait(120) == 0, cluster.describe()
    results = coord.results()
    assert results is not None and results["task"] == "classification"
    epochs = [json.loads(line) for line in (coord.out / "epochs.jsonl").read_text().splitlines()]
    assert [e["epoch"] for e in epochs] == [0, 1]
    assert [e["rounds"] for e in epochs] == [e["rounds"] for e in results["epochs"]]
    assert all(e["parties"]["up"] == 4 and "test" in e for e in epochs)
    assert epochs[-1]["test"]["accuracy"] == pytest.approx(results["test"]["rows"][-1]["accuracy"])
    subsets = {tuple(s["blocks"]): s for s in results["subsets"]}
    assert len(subsets) == 15
    assert subsets[(0, 1, 2, 3)]["accuracy"] == results["test"]["rows"][-1]["accuracy"]
    result = invoke(str(coord.out))
    assert result.exit_code == 0, result.output
    html = (coord.out / "report" / "report.html").read_text()
    assert_pngs_decode_at_stated_size(html, coord.out / "report", {"curves", "subsets", "drop_one"})
    assert f"Run {coord.run_id}" in html and "<td>deadlines.embed</td>" in html


def _binary_tables(root: Path, rows: int = 1500) -> list[Path]:
    """Three parties' CSVs of a binary label about 25% positive, block 0 holding it."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(rows, 6))
    y = rng.random(rows) < 1 / (1 + np.exp(-(x[:, 0] + x[:, 2] - x[:, 4] - 1.5)))
    paths = []
    for block, cols in enumerate([(0, 1), (2, 3), (4, 5)]):
        head = ["id", *(f"f{c}" for c in cols), *(["y"] if block == 0 else [])]
        lines = [",".join(head)]
        for i in range(rows):
            cells = [f"c{i:04d}", *(f"{x[i, c]:.3f}" for c in cols)]
            lines.append(",".join(cells + (["yes" if y[i] else "no"] if block == 0 else [])))
        paths.append(root / f"party{block}.csv")
        paths[-1].write_text("\n".join(lines) + "\n")
    return paths


@needs_matplotlib
def test_given_a_binary_run_with_a_rare_class_when_reporting_then_f1_auc_and_brier_are_shown(
    tmp_path: Path,
) -> None:
    args = ["simulate", "--id-column", "id", "--label-column", "y", "--epochs", "3"]
    for path in _binary_tables(tmp_path):
        args += ["--data", str(path)]
    args += ["--no-progress", "--run-dir", str(tmp_path / "run"), "--out", str(tmp_path / "s.json")]
    simulated = CliRunner().invoke(app, args)
    assert simulated.exit_code == 0, simulated.output
    assert invoke(str(tmp_path / "run")).exit_code == 0
    html = (tmp_path / "run" / "report" / "report.html").read_text()
    summary = re.search(r"<p>3 epochs;.*?</p>", html)
    assert summary is not None, html[:2000]
    for shown in ("test accuracy ", "F1 ", "ROC AUC 0.", "Brier score 0."):
        assert shown in summary.group(0), summary.group(0)
    assert "<th>Brier score</th>" in html  # a column of the test table
    # results.json counts the best epoch from 1, as its history and the printed line do
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    stop = results["early_stop"]
    assert stop["epochs_from"] == 1 and [e for e, _ in stop["history"]] == [1, 2, 3]
    assert 1 <= stop["best_epoch"] <= 3
    assert f"best validation epoch {stop['best_epoch']}, restored" in simulated.output
    choice = results["validation_choice"]
    assert choice["threshold"] is not None and choice["threshold_metric"] in ("f1", "accuracy")


@needs_matplotlib
def test_given_three_parties_and_long_notes_when_drawn_then_none_runs_under_the_colour_bar() -> (
    None
):
    from vfl_cli.report_plots import pyplot, subsets_figure
    from vfl_core.inference.headline import METRICS

    blocks = [[0, 1, 2], [0, 1], [0, 2], [1, 2], [0], [1], [2]]
    subsets = [
        {"blocks": b, "samples": 156, "unscored": 1234, "accuracy": 0.7 + 0.01 * i}
        for i, b in enumerate(blocks)
    ]
    subsets[3] = {"blocks": [1, 2], "samples": 0, "unscored": 156}
    fig = subsets_figure(subsets, METRICS["accuracy"])
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        heat, bar = fig.axes[0], fig.axes[-1]
        notes = [t for t in heat.child_axes[0].get_yticklabels() if t.get_text()]
        assert [t.get_text() for t in notes][:2] == [
            "70.00% (1234 unscored)",
            "71.00% (1234 unscored)",
        ]
        bar_left = bar.get_window_extent(renderer).x0
        width = fig.get_size_inches()[0] * fig.dpi
        for note in notes:
            box = note.get_window_extent(renderer)
            assert box.x1 < bar_left and box.x1 <= width, note.get_text()
    finally:
        pyplot().close(fig)
