"""The shortest federation a newcomer types (docs/guide/running.md): `vfl-client --block K --data
./quadrantK` with the default `--coordinator localhost:50051` and `--listen auto`, against a
coordinator on every interface. `localhost` may reach the coordinator over ::1 while the client
listens on 127.0.0.1: the coordinator once called it back at
`[[::1]]:port` and every run failed its alignment."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import Cluster, prepare_digits, reserved_port

RUN_TIMEOUT_S = 180.0


@pytest.mark.slow
def test_given_clients_on_the_localhost_default_when_run_then_training_finishes(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # the worker's copy of these files (other modules on it prepare the same), made once
    parties = prepare_digits(tmp_path_factory.getbasetemp(), clients=2)
    port = reserved_port()
    with Cluster(tmp_path / "cluster") as cluster:
        coord = cluster.coordinator(clients=2, epochs=1, extra=["--listen", f"0.0.0.0:{port}"])
        here = ["--coordinator", f"localhost:{port}", "--listen", "auto"]  # the defaults' kind
        clients = [cluster.client(coord, d, here) for d in parties]
        assert coord.wait(RUN_TIMEOUT_S) == 0, coord.tail()
        assert coord.results()["status"] == "ok"
        for client in clients:
            assert client.wait(60) == 0, client.tail()
