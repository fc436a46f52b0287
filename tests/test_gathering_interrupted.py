"""A coordinator stopped while it gathers parties tells those that registered, with real
processes: they exit at once saying the run was interrupted, instead of waiting for it for their
whole --register-timeout."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from harness import Cluster, prepare_digits

from vfl_cli.errors import EXIT_RUN_NOT_OK


@pytest.fixture(scope="module")
def parties(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    # prepared once for both signals (and for any module on this worker that asks the same)
    return prepare_digits(tmp_path_factory.getbasetemp(), clients=3)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_given_a_coordinator_gathering_parties_when_signalled_then_registered_parties_exit(
    tmp_path: Path, parties: list[Path], sig: signal.Signals
) -> None:
    with Cluster(tmp_path / "cluster") as cluster:
        coord = cluster.coordinator(clients=3)  # two of them never come
        client = cluster.client(coord, parties[0])
        cluster.wait_for(
            lambda: "synchronised for block 0" in coord.log(), 120, "the party to register"
        )
        coord.signal(sig)
        assert coord.wait(30) != 0, cluster.describe()
        # told at once, not after its --register-timeout of 120 s
        assert client.wait(30) == EXIT_RUN_NOT_OK, cluster.describe()
        assert "client stopped: run interrupted" in client.log(), client.log()[-2000:]
        assert "block(s) 0 told: run interrupted" in coord.log(), coord.log()[-2000:]
