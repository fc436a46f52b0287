"""Samples that only the feature-only parties hold, predicted and scored by a real federation.

Three parties from their own CSV tables over gRPC (real processes): a bank with the labels, which
lacks the features of a third of its customers (rows with the label and empty feature cells:
label-only rows), and a retailer and a telecom without labels. The federation trains, reports
test metrics for the observed sets without the bank ({1}, {2}, {1, 2}), matches the in-process
run of the same tables round for round, and `vfl predict` gives those customers a class instead
of -1. `vfl simulate` on the same tables reports the same observed sets.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from harness import SECRET, Cluster, train_in_process
from typer.testing import CliRunner

from vfl_cli.app import app
from vfl_core.config import TrainConfig
from vfl_core.data.party_dir import save_party_dir
from vfl_core.data.tabular import federation_sources, load_table_federation

pytestmark = pytest.mark.slow

RUN_TIMEOUT_S = 120.0
NAMES = ("bank", "retail", "telecom")  # blocks 0, 1, 2; labels at the bank
OTHERS_ONLY = ("1", "2", "1,2")  # observed sets without the bank, as results.json names them


def write_tables(directory: Path, n: int = 300, seed: int = 4) -> dict[str, Path]:
    """The label depends on every party's first column; the bank holds the features of 65% of
    the customers and the label of all, the others 80% each."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(3, n, 2))
    label = np.where(x[1, :, 0] + x[2, :, 0] + 0.5 * x[0, :, 0] > 0, "yes", "no")
    held = [rng.random(n) < p for p in (0.65, 0.8, 0.8)]
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for k, name in enumerate(NAMES):
        header = ["customer", f"{name}_a", f"{name}_b", *(["default"] if k == 0 else [])]
        rows = []
        for i in range(n):
            cells = [f"{v:.3f}" for v in x[k, i]] if held[k][i] else ["", ""]
            if k == 0:
                rows.append([f"C{i:04d}", *cells, label[i]])  # label-only rows too
            elif held[k][i]:
                rows.append([f"C{i:04d}", *cells])
        paths[name] = directory / f"{name}.csv"
        with paths[name].open("w", newline="") as f:
            csv.writer(f).writerows([header, *rows])
    return paths


def _sources(paths: dict[str, Path]):
    return federation_sources(
        [paths[n] for n in NAMES], None, id_column="customer", label_column="default",
        label_blocks=(0,),
    )  # fmt: skip


def _client_args(path: Path) -> list[str]:
    args = ["--id-column", "customer", "--block", str(NAMES.index(path.stem)), "--clients", "3"]
    return args + (["--label-column", "default"] if path.stem == "bank" else ["--num-classes", "2"])


def _others_only_test_ids(paths: dict[str, Path]) -> dict[str, set[int]]:
    """Test customers the bank holds only the label of, with the blocks holding features."""
    parties = load_table_federation(_sources(paths))
    holders: dict[str, set[int]] = {}
    for party in parties:
        split = party.splits["test"]
        for sample in split.ids[: len(split.features)].tolist():
            holders.setdefault(sample, set()).add(party.meta.block)
    return {i: blocks for i, blocks in holders.items() if 0 not in blocks}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    root = tmp_path_factory.mktemp("label_only")
    paths = write_tables(root / "tables")
    wanted = _others_only_test_ids(paths)
    with Cluster(root / "cluster") as cluster:
        coord, _ = cluster.federation(
            [paths[n] for n in NAMES], epochs=2, serve=True, client_extra=_client_args
        )
        cluster.wait_serving(coord, RUN_TIMEOUT_S)
        out = root / "predictions.csv"
        args = ["predict", "--coordinator", coord.address, "--secret", SECRET, "--insecure"]
        result = CliRunner().invoke(
            app, [*args, "--ids", ",".join(sorted(wanted)), "--out", str(out)]
        )
        assert result.exit_code == 0, result.output
        with out.open() as f:
            predicted = {row["id"]: row for row in csv.DictReader(f)}
        results, rounds = coord.results(), coord.rounds()
        config = json.loads((coord.out / "config.json").read_text())["train"]
    yield {
        "paths": paths,
        "wanted": wanted,
        "predicted": predicted,
        "results": results,
        "rounds": rounds,
        "train": TrainConfig.model_validate(config),
    }


def test_given_customers_only_others_hold_when_predicting_over_grpc_then_each_gets_a_class(
    run: dict,
) -> None:
    wanted = run["wanted"]
    assert {frozenset(b) for b in wanted.values()} == {
        frozenset({1}),
        frozenset({2}),
        frozenset({1, 2}),
    }
    for sample, blocks in wanted.items():
        row = run["predicted"][sample]
        assert set(map(int, row["observed_blocks"].split("+"))) == blocks, sample
        assert int(row["predicted_class"]) in (0, 1), sample  # before: -1, no head observed it


def test_given_a_grpc_run_when_evaluated_then_sets_without_the_label_party_are_scored_and_match(
    run: dict, tmp_path: Path
) -> None:
    rows = {r["observed"]: r for r in run["results"]["test"]["rows"]}
    wanted = run["wanted"]
    for observed in OTHERS_ONLY:
        blocks = {int(b) for b in observed.split(",")}
        expected = sum(1 for held in wanted.values() if held == blocks)
        assert rows[observed]["samples"] == expected > 0, observed
        assert 0.0 <= rows[observed]["accuracy"] <= 1.0
    # the same tables, config and secret in one process: the same rounds, bit for bit
    dirs = []
    for party in load_table_federation(_sources(run["paths"])):
        dirs.append(tmp_path / f"party{party.meta.block}")
        save_party_dir(dirs[-1], party)
    _, records, evaluation = train_in_process(dirs, run["train"])
    assert len(run["rounds"]) == len(records) > 0
    assert any(r.pattern == (1, 2) and set(r.losses) == {0} for r in records)  # label-only
    for got, want in zip(run["rounds"], records, strict=True):
        assert got == json.loads(json.dumps(want.to_json())), f"round {want.round_id}"
    report = json.loads(json.dumps(evaluation.to_json(), default=str))
    want_rows = {r["observed"]: r for r in report["rows"]}
    assert set(want_rows) == set(rows)
    for observed, row in rows.items():
        assert row["samples"] == want_rows[observed]["samples"]
        assert row["accuracy"] == pytest.approx(want_rows[observed]["accuracy"], abs=1e-9)


def test_given_the_same_tables_when_simulated_then_the_table_has_the_sets_without_the_bank(
    run: dict, tmp_path: Path
) -> None:
    paths = run["paths"]
    args = ["simulate", *(a for n in NAMES for a in ("--data", str(paths[n])))]
    args += ["--id-column", "customer", "--label-column", "default", "--label-blocks", "0"]
    args += ["--epochs", "2", "--no-progress", "--out", str(tmp_path / "sim.json")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    lines = {line.split()[0]: line.split() for line in result.output.splitlines() if line}
    for observed in OTHERS_ONLY:
        blocks = {int(b) for b in observed.split(",")}
        expected = sum(1 for held in run["wanted"].values() if held == blocks)
        assert int(lines[observed][1]) == expected, result.output
    assert "unscored:" not in result.output  # the table's note (drop-one lines count theirs)
