"""`vfl simulate`: a result table and a JSON record on success; on bad input exit code 2 and one
line starting with "error:", never a traceback."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from vfl_cli.app import app
from vfl_core.data.datasets import load_digits_dataset
from vfl_core.data.prepare import prepare_parties

K = 4
# Small and fast (one torch thread; the command sets it process-wide, the fixture restores it).
FAST = ["--epochs", "1", "--representation", "mlp", "--hidden", "8", "--embed-dim", "4"]
FAST += ["--batch-size", "128", "--no-progress", "--threads", "1"]


# The command configures the root logger and torch's thread count process-wide (conftest.py).
pytestmark = pytest.mark.usefixtures("restore_process_state")


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cli")
    digits = load_digits_dataset()
    prepare_parties(digits, root / "k4", K, [0.2] * K, [0.2] * K, 0.2, seed=0)
    prepare_parties(digits, root / "k2", 2, [0.0] * 2, [0.0] * 2, 0.2, seed=0)
    return root


@pytest.fixture
def parties(prepared: Path, tmp_path: Path) -> Path:
    """A fresh, writable copy of the four party directories."""
    out = tmp_path / "parties"
    shutil.copytree(prepared / "k4", out)
    return out


def invoke(*args: str):
    return CliRunner().invoke(app, ["simulate", *args])


def data_args(root: Path, blocks=range(K)) -> list[str]:
    return [arg for k in blocks for arg in ("--data", str(root / f"party{k}"))]


def assert_user_error(result, needle: str) -> None:
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines[0]
    assert needle in lines[0], lines[0]
    assert result.stdout == ""


# ---------------------------------------------------------------- success


def test_given_digits_when_simulating_one_epoch_then_table_and_json_with_config_and_seed(
    tmp_path: Path,
) -> None:
    out = tmp_path / "runs" / "sim.json"
    result = invoke(
        *FAST, "--seed", "3", "--p-miss-test", "0", "--p-miss-test", "0.5", "--out", str(out)
    )
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    text = result.stdout
    assert "trained 1 epochs on digits with K=4" in text and "seed 3" in text
    assert "test p_miss 0.0" in text and "test p_miss 0.5" in text
    assert "observed blocks" in text and "\nall " in text
    assert f"results written to {out}" in text
    record = json.loads(out.read_text())
    assert record["config"]["dataset"] == "digits"
    assert record["config"]["train"]["seed"] == 3
    assert record["config"]["train"]["epochs"] == 1
    assert record["config"]["train"]["model"]["hidden"] == [8]
    assert record["config"]["p_miss_test"] == [0.0, 0.5]
    assert [r["p_miss_test"] for r in record["results"]] == [0.0, 0.5]
    assert len(record["epochs"]) == 1
    for res in record["results"]:
        assert res["rows"][-1]["observed"] == "all"
        assert 0.0 <= res["rows"][-1]["accuracy"] <= 1.0
    # The full test set is only observed by all four blocks when nothing is missing.
    assert [r["observed"] for r in record["results"][0]["rows"]] == ["0,1,2,3", "all"]


def test_given_party_dirs_when_simulating_then_their_test_set_is_scored(
    parties: Path, tmp_path: Path
) -> None:
    out = tmp_path / "dirs.json"
    result = invoke(*FAST, *data_args(parties), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "on party dirs" in result.stdout and "test set" in result.stdout
    record = json.loads(out.read_text())
    assert record["results"][0]["p_miss_test"] is None
    assert len(record["config"]["party_dirs"]) == K


def test_given_same_seed_when_simulating_twice_then_same_json_results(tmp_path: Path) -> None:
    outs = [tmp_path / "a.json", tmp_path / "b.json"]
    for out in outs:
        assert invoke(*FAST, "--seed", "9", "--out", str(out)).exit_code == 0
    a, b = (json.loads(o.read_text()) for o in outs)
    assert a["results"] == b["results"] and a["config"] == b["config"]
    assert [e["mean_loss"] for e in a["epochs"]] == [e["mean_loss"] for e in b["epochs"]]


# ---------------------------------------------------------------- bad party directories


def remove(relative: str) -> Callable[[Path], None]:
    return lambda root: (root / relative).unlink()


def write(relative: str, data: bytes) -> Callable[[Path], None]:
    return lambda root: (root / relative).write_bytes(data)


def edit_meta(party: str, **changes: object) -> Callable[[Path], None]:
    def apply(root: Path) -> None:
        path = root / party / "meta.json"
        meta = json.loads(path.read_text())
        meta.update(changes)
        path.write_text(json.dumps(meta))

    return apply


def reshape_features(party: str, split: str) -> Callable[[Path], None]:
    def apply(root: Path) -> None:
        path = root / party / split / "features.npy"
        features = np.load(path)
        np.save(path, np.concatenate([features, features], axis=3))  # (n, 1, 4, 8)

    return apply


def flip_label(party: str) -> Callable[[Path], None]:
    def apply(root: Path) -> None:
        path = root / party / "train" / "labels.npy"
        labels = np.load(path)
        labels[0] = (labels[0] + 1) % 10
        np.save(path, labels)

    return apply


BROKEN: dict[str, tuple[Callable[[Path], None], str]] = {
    "missing ids": (remove("party1/train/ids.npy"), "party1/train/ids.npy: missing"),
    "missing meta": (remove("party2/meta.json"), "meta.json: missing"),
    "corrupt features": (write("party1/train/features.npy", b"garbage"), "not a .npy file"),
    "truncated features": (
        lambda root: write(
            "party3/test/features.npy",
            (root / "party3/test/features.npy").read_bytes()[:200],
        )(root),
        "party3/test/features.npy",
    ),
    "corrupt meta": (write("party0/meta.json", b"{"), "malformed JSON"),
    "shape vs meta": (reshape_features("party2", "train"), "does not match"),
    "test shape vs train": (reshape_features("party2", "test"), "does not match"),
    "labels disagree": (flip_label("party3"), "labels disagree"),
    "block out of range": (edit_meta("party2", block=7), "block 7 out of range"),
    "duplicate block": (edit_meta("party2", block=1), "two parties hold block 1"),
    "other data set": (edit_meta("party1", dataset="mnist"), "parties disagree on dataset"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_given_broken_party_dir_when_simulating_then_exit_2_and_one_error_line(
    parties: Path, tmp_path: Path, case: str
) -> None:
    breaker, needle = BROKEN[case]
    breaker(parties)
    out = tmp_path / "never.json"
    result = invoke(*FAST, *data_args(parties), "--out", str(out))
    assert_user_error(result, needle)
    assert not out.exists()


def test_given_parties_cut_for_other_k_when_simulating_then_feature_layouts_refused(
    prepared: Path, tmp_path: Path
) -> None:
    # Block 1 of a two-party cut (8x4 strips) beside blocks of a four-party cut (4x4 quadrants).
    args = [*data_args(prepared / "k4", [0, 2, 3]), "--data", str(prepared / "k2" / "party1")]
    result = invoke(*FAST, *args, "--out", str(tmp_path / "o.json"))
    assert_user_error(result, "parties disagree on num_blocks")


def test_given_missing_party_dir_when_simulating_then_exit_2(tmp_path: Path) -> None:
    result = invoke(*FAST, "--data", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o.json"))
    assert_user_error(result, "party directory does not exist")


# ---------------------------------------------------------------- bad options


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--dataset", "cifar"], "unknown data set 'cifar'"),
        (["--hidden", "a,b"], "--hidden must be comma-separated integers"),
        (["--hidden", "10,x"], "--hidden must be comma-separated integers"),
        (["--hidden", "0"], "model.hidden sizes must all be >= 1"),
        (["--hidden", "10,-3"], "model.hidden sizes must all be >= 1"),
        (["--embed-dim", "0"], "embed_dim"),
        (["--balance", "sometimes"], "balance"),
        (["--p-miss-test", "1.5"], "missing probability must be in [0, 1]"),
        (["--label-blocks", "7"], "label block 7 out of range"),
        (["--dataset", "credit", "--data-path", "/nonexistent/dir"], "UCI_Credit_Card.csv"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_given_bad_option_when_simulating_then_exit_2_and_one_error_line(
    tmp_path: Path, args: list[str], needle: str
) -> None:
    result = invoke(*FAST, *args, "--out", str(tmp_path / "o.json"))
    assert_user_error(result, needle)


def test_given_early_stopping_when_simulating_then_both_jsons_record_it(tmp_path: Path) -> None:
    """`vfl simulate --early-stop-patience` (the same TrainConfig field as vfl-coordinator's):
    the record is in the --out JSON and in the run directory's results.json."""
    out, run_dir = tmp_path / "sim.json", tmp_path / "run"
    fast = [a if a != "1" else "3" for a in FAST]  # 3 epochs
    result = invoke(
        *fast, "--early-stop-patience", "1", "--out", str(out), "--run-dir", str(run_dir)
    )
    assert result.exit_code == 0, result.output
    stop = json.loads(out.read_text())["early_stop"]
    assert stop == json.loads((run_dir / "results.json").read_text())["early_stop"]
    assert stop["patience"] == 1 and stop["validation_samples"] > 0
    assert len(stop["history"]) == len(json.loads(out.read_text())["epochs"]) >= 1
    assert stop["restored"] == [0, 1, 2, 3]
    assert json.loads(out.read_text())["config"]["train"]["early_stop_patience"] == 1


def test_given_a_regression_task_when_early_stopping_then_it_watches_the_rmse(
    tmp_path: Path,
) -> None:
    """Issue 27 turned this from an error into the tables' default: the validation RMSE."""
    out = tmp_path / "o.json"
    fast = [a if a != "1" else "3" for a in FAST]  # 3 epochs
    args = ["--dataset", "diabetes", "--early-stop-patience", "1", "--out", str(out)]
    result = invoke(*fast, *args)
    assert result.exit_code == 0, result.output
    stop = json.loads(out.read_text())["early_stop"]
    assert stop["metric"] == "rmse" and stop["validation_samples"] > 0
    ran = len(json.loads(out.read_text())["epochs"])
    assert f"trained {ran} of at most 3 epochs" in result.output
