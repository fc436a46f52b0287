"""The tables' default rounds (vfl_core.auto_rounds, issue 43): unset staleness, late verdict,
epoch flow and data plane resolve per tables or images, and to exact rounds where the run needs
them, with one log line saying why."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from tabular_tables import LABEL_COLUMN, write_tables
from typer.testing import CliRunner

from vfl_cli.app import app
from vfl_coordinator.config import CoordinatorConfig
from vfl_coordinator.runner import _exact_where_needed
from vfl_core.auto_rounds import (
    AUTO_EPOCH_FLOW,
    AUTO_FRESH_OWN_TOWER,
    AUTO_STALENESS,
    FAULTS,
    check_mixed,
    pin_exact,
    resolve,
)
from vfl_core.config import TrainConfig
from vfl_core.errors import ConfigError
from vfl_core.training.faults import FaultConfig

LOGGER = "vfl_core.auto_rounds"


def test_given_nothing_set_when_resolved_then_tables_overlap_rounds_and_images_stay_exact() -> None:
    tables = resolve(TrainConfig(), tabular=True)
    assert tables.staleness == AUTO_STALENESS == 5
    assert tables.overlap_validation is True
    assert tables.epoch_flow is AUTO_EPOCH_FLOW is True
    assert tables.fresh_own_tower is True  # a party's, as for one label party (calls decide)
    assert tables.data_plane == "auto"
    images = resolve(TrainConfig(), tabular=False)
    assert (images.staleness, images.overlap_validation, images.epoch_flow) == (0, False, False)
    assert images.data_plane == "relay"


def test_given_explicit_values_when_resolved_then_kept() -> None:
    exact = resolve(TrainConfig(staleness=0), tabular=True)
    assert (exact.staleness, exact.overlap_validation, exact.epoch_flow) == (0, False, False)
    asked = TrainConfig(staleness=0, overlap_validation=True, data_plane="relay")
    assert resolve(asked, tabular=True).overlap_validation is True
    assert resolve(asked, tabular=True).data_plane == "relay"
    given = resolve(TrainConfig(staleness=1), tabular=True)
    assert (given.staleness, given.overlap_validation, given.epoch_flow) == (1, False, False)
    images = resolve(TrainConfig(staleness=2), tabular=False)
    assert (images.staleness, images.overlap_validation) == (2, False)  # the tables' default
    flowing = resolve(TrainConfig(staleness=2, epoch_flow=True), tabular=False)
    assert (flowing.overlap_validation, flowing.epoch_flow) == (True, True)  # what flow needs


def test_given_explicit_staleness_zero_when_resolved_then_exact_without_a_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger=LOGGER):
        resolved = resolve(TrainConfig(staleness=0), tabular=True)
    assert resolved.staleness == 0
    assert not [r for r in caplog.records if r.name == LOGGER]


@pytest.mark.parametrize(
    ("options", "why"),
    [
        ({"local_steps": 2}, "--local-steps reuses each round's own tensors"),
        ({"method": "dvfl"}, "method dvfl runs steps of its own"),
        ({"method": "dlvm"}, "method dlvm runs steps of its own"),
        ({"encrypt_relay": True}, "--encrypt-relay asks for the sealed relay"),
    ],
)
def test_given_an_option_that_needs_exact_rounds_when_resolved_then_exact_and_logged(
    caplog: pytest.LogCaptureFixture, options: dict, why: str
) -> None:
    with caplog.at_level(logging.INFO, logger=LOGGER):
        resolved = resolve(TrainConfig(**options), tabular=True)
    assert (resolved.staleness, resolved.overlap_validation, resolved.epoch_flow) == (
        0,
        False,
        False,
    )
    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert lines == [f"staleness unset: exact rounds (0) on these tables, as {why}"]


def test_given_a_callers_reason_when_resolved_then_exact_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sequential = "the sequential engine runs one round at a time"
    with caplog.at_level(logging.INFO, logger=LOGGER):
        resolved = resolve(TrainConfig(), tabular=True, why_exact=sequential)
        quiet = resolve(TrainConfig(), tabular=True, why_exact=sequential, quiet=True)
    assert resolved.staleness == quiet.staleness == 0
    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert lines == [f"staleness unset: exact rounds (0) on these tables, as {sequential}"]


def test_given_injected_faults_or_no_pipeline_when_the_coordinator_starts_then_parties_told_exact(
    caplog: pytest.LogCaptureFixture,
) -> None:
    faults = FaultConfig(fail_rate=0.2)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        faulty = _exact_where_needed(CoordinatorConfig(faults=faults))
        sequential = _exact_where_needed(CoordinatorConfig(pipeline=False))
        plain = _exact_where_needed(CoordinatorConfig())
    assert faulty.train.staleness == 0 and sequential.train.staleness == 0
    assert plain.train.staleness is None  # left to the parties' data
    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert lines == [
        f"staleness unset: exact rounds (0), as {FAULTS}",
        "staleness unset: exact rounds (0), as --no-pipeline runs the relay's three calls "
        "per round",
    ]
    given = CoordinatorConfig(faults=faults, train=TrainConfig(staleness=2))
    assert _exact_where_needed(given).train.staleness == 2  # given, not pinned
    assert pin_exact(TrainConfig(), None).staleness is None


def test_given_epoch_flow_when_the_rounds_resolve_exact_then_refused() -> None:
    with pytest.raises(ConfigError, match="--epoch-flow runs the blocks of --staleness"):
        resolve(TrainConfig(epoch_flow=True), tabular=False)
    with pytest.raises(ConfigError, match="staleness 0 and overlap-validation off"):
        resolve(TrainConfig(epoch_flow=True, local_steps=1), tabular=True)
    with pytest.raises(ValueError, match="give both"):
        TrainConfig(epoch_flow=True, staleness=0)
    flowing = resolve(TrainConfig(epoch_flow=True), tabular=True)
    assert (flowing.staleness, flowing.overlap_validation, flowing.epoch_flow) == (5, True, True)


def test_given_the_own_tower_unset_when_the_federation_resolves_it_then_per_label_parties(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger=LOGGER):
        one = resolve(TrainConfig(), tabular=True, label_parties=1)
        two = resolve(TrainConfig(), tabular=True, label_parties=2)
        images = resolve(TrainConfig(), tabular=False, label_parties=1)
        given_staleness = resolve(TrainConfig(staleness=5), tabular=True, label_parties=1)
        exact = resolve(TrainConfig(staleness=0, fresh_own_tower=True), True, label_parties=2)
    assert (one.fresh_own_tower, two.fresh_own_tower) == (True, False)
    assert two.staleness == one.staleness == AUTO_STALENESS  # the rest of the recipe stays
    assert images.fresh_own_tower is False and given_staleness.fresh_own_tower is False
    assert exact.fresh_own_tower is True  # a no-op with exact rounds, as given
    lines = [r.getMessage() for r in caplog.records if "fresh_own_tower" in r.getMessage()]
    assert lines == ["fresh_own_tower unset: off, as 2 label parties read each other's embeddings"]
    with pytest.raises(ConfigError, match="--fresh-own-tower needs one label party, not 2"):
        resolve(TrainConfig(fresh_own_tower=True), tabular=True, label_parties=2)


def test_given_tables_and_images_when_staleness_unset_then_refused() -> None:
    with pytest.raises(ConfigError, match="give --staleness"):
        check_mixed(TrainConfig(), [(5,), (1, 8, 8)])
    check_mixed(TrainConfig(staleness=0), [(5,), (1, 8, 8)])
    check_mixed(TrainConfig(), [(5,), (7,)])


def test_given_the_data_plane_unset_then_auto_on_tables_and_relay_elsewhere() -> None:
    assert TrainConfig().plane(tabular=True) == "auto"
    assert TrainConfig().plane(tabular=False) == "relay"
    assert TrainConfig(method="dvfl").plane(tabular=True) == "relay"
    assert TrainConfig(data_plane="relay").plane(tabular=True) == "relay"


def _simulate(tmp_path: Path, *extra: str) -> dict:
    paths = write_tables(tmp_path, n=200)
    args = ["simulate", "--id-column", "customer_id", "--label-column", LABEL_COLUMN]
    for name in ("bank", "retail", "telecom"):
        args += ["--data", str(paths[name])]
    out = tmp_path / "sim.json"
    args += ["--epochs", "2", "--no-progress", "--out", str(out), *extra]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text())["config"]["train"]


def test_given_tables_and_no_options_when_simulated_then_the_record_shows_the_resolved_rounds(
    tmp_path: Path,
) -> None:
    train = _simulate(tmp_path)
    assert train["staleness"] == AUTO_STALENESS
    assert train["overlap_validation"] is True
    assert train["epoch_flow"] is AUTO_EPOCH_FLOW
    assert train["fresh_own_tower"] is AUTO_FRESH_OWN_TOWER is True  # labels at one party
    assert train["data_plane"] == "auto"


def test_given_tables_and_injected_faults_when_simulated_then_exact_rounds_recorded(
    tmp_path: Path,
) -> None:
    train = _simulate(tmp_path, "--fault-rate", "0.1")
    assert (train["staleness"], train["overlap_validation"], train["epoch_flow"]) == (
        0,
        False,
        False,
    )
    assert train["fresh_own_tower"] is False


@pytest.mark.slow
def test_given_tables_over_grpc_and_no_options_when_trained_then_direct_with_the_recipe(
    tmp_path: Path,
) -> None:
    """Real processes over mutual TLS: the coordinator resolves the tables' rounds as each
    party does (a party whose config differed would refuse the run), probes the peers and
    trains on the direct plane; the record holds the resolved values. (The harness gives every
    coordinator --data-plane relay; `auto`, what an unset plane is on tables, is given here.)"""
    from harness import Cluster

    from vfl_cli.certs_cmd import create_federation

    blocks = {"bank": 0, "retail": 1, "telecom": 2}
    certs = tmp_path / "certs"
    create_federation(certs, [f"party{k}" for k in blocks.values()], [])
    paths = write_tables(tmp_path / "tables", n=300)

    def client_args(path: Path) -> list[str]:
        args = ["--id-column", "customer_id", "--block", str(blocks[path.stem]), "--clients", "3"]
        args += ["--party-id", f"party{blocks[path.stem]}"]
        return args + (["--label-column", LABEL_COLUMN] if path.stem == "bank" else [])

    with Cluster(tmp_path / "cluster", tls_dir=certs) as cluster:
        coord, _ = cluster.federation(
            [paths[name] for name in blocks],
            epochs=2,
            extra=["--data-plane", "auto"],
            client_extra=client_args,
        )
        assert coord.wait(240) == 0, cluster.describe()
        log = coord.log_path.read_text()
        train = coord.results()["config"]["train"]
    assert "data plane: direct (--data-plane auto: every party reaches" in log
    assert (train["staleness"], train["overlap_validation"]) == (AUTO_STALENESS, True)
    assert train["epoch_flow"] is AUTO_EPOCH_FLOW and train["data_plane"] == "direct"
    assert train["fresh_own_tower"] is AUTO_FRESH_OWN_TOWER  # the coordinator's resolution
