"""`vfl-client --bundle-dir` in a real federation (issue 31): when the run ends each party writes
its serving bundle, with the trained weights: the same bundle `vfl export` makes from the
party's end checkpoint."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from harness import Cluster, prepare_digits
from typer.testing import CliRunner

from vfl_cli.app import app
from vfl_core.data.party_dir import load_party_dir
from vfl_core.serving.bundle import load_bundle

RUN_TIMEOUT_S = 240.0


@pytest.mark.slow
def test_given_bundle_dir_when_training_ends_then_each_party_wrote_its_trained_bundle(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # the worker's copy of these files (other modules on it prepare the same), made once
    dirs = prepare_digits(tmp_path_factory.getbasetemp(), p_miss=0.1, seed=0, clients=2)
    ckpt, bundles = tmp_path / "ckpt", tmp_path / "bundles"

    def extra(d: Path) -> list[str]:
        return ["--checkpoint-dir", str(ckpt), "--bundle-dir", str(bundles / d.name)]

    # a validation split and the strict subset rule: the run chooses subsets on validation,
    # and the coordinator tells them to the parties with the end of the run
    choose = ["--early-stop-patience", "5", "--validation-fraction", "0.3"]
    choose += ["--subset-choice", "best"]
    with Cluster(tmp_path / "cluster") as cluster:
        coord, clients = cluster.federation(dirs, epochs=1, client_extra=extra, extra=choose)
        assert coord.wait(RUN_TIMEOUT_S) == 0, cluster.describe()
        for client in clients:
            assert client.wait(30) == 0, cluster.describe()
        results, results_file = coord.results(), coord.out / "results.json"
    assert results is not None
    chosen = {
        tuple(c["observed"]): tuple(c["kept"]) for c in results["validation_choice"]["subsets"]
    }
    assert chosen, "the test needs a subset choice"
    for d in dirs:
        bundle = load_bundle(bundles / d.name)
        exported = tmp_path / "exported" / d.name
        args = ["export", "--checkpoint", str(ckpt / f"{d.name}.pt"), "--data", str(d)]
        args += ["--choice", str(results_file)]  # the same decision as told at the end
        result = CliRunner().invoke(app, [*args, "--out", str(exported)])
        assert result.exit_code == 0, result.output
        again = load_bundle(exported)
        assert bundle.meta == again.meta and bundle.preprocessing is None
        x = load_party_dir(d).splits["test"].features[:16]
        np.testing.assert_array_equal(bundle.embed(x), again.embed(x))
        assert bundle.meta.has_head == load_party_dir(d).meta.has_labels  # digits: every party
        rules = {r.observed: r.kept for r in bundle.meta.subsets}
        assert rules == {o: k for o, k in chosen.items() if o != k}  # told with the end
        assert bundle.meta.threshold is None  # ten classes: the argmax
