"""`--data-plane auto` in a real federation (vfl_coordinator.plane_choice): the
coordinator probes whether every party reaches the peers it would push tensors to, and trains on
the direct plane when they do, on the relay when one does not.

A peer made unreachable: the feature party party2 runs with a dead HTTP CONNECT proxy for every
address but the coordinator's (`grpc_proxy`, `no_grpc_proxy`: gRPC's own settings), so it reaches
the coordinator and nobody else, as a party behind a firewall that admits only the coordinator.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from harness import BIN, Cluster

from vfl_cli.certs_cmd import create_federation
from vfl_wire.audit import read_audit

pytestmark = pytest.mark.slow

K = 3
RUN_TIMEOUT_S = 240.0


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("auto-certs") / "certs"
    create_federation(root, [f"party{k}" for k in range(K)], [])
    return root


@pytest.fixture(scope="module")
def one_label(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    out = tmp_path_factory.mktemp("auto-one-label")
    argv = [str(BIN / "vfl"), "prepare", "--out", str(out), "--dataset", "digits"]
    argv += ["--clients", str(K), "--p-miss", "0.1", "--seed", "0", "--label-blocks", "0"]
    subprocess.run(argv, check=True, capture_output=True, timeout=300)
    return [out / f"party{k}" for k in range(K)]


@pytest.mark.parametrize("cut_off", [False, True], ids=["all-reach", "party2-cut-off"])
def test_given_auto_when_a_peer_is_unreachable_then_relay_else_direct(
    tmp_path: Path,
    certs: Path,
    one_label: list[Path],
    cut_off: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    audit = tmp_path / "messages.audit"
    with Cluster(tmp_path / "cluster", tls_dir=certs) as cluster:
        coord = cluster.coordinator(
            clients=K,
            epochs=1,
            deadline=30.0,
            extra=["--early-stop-patience", "3", "--audit-log", str(audit), "--data-plane", "auto"],
        )
        for d in one_label[:2]:
            cluster.client(coord, d)
        extra: list[str] = []
        if cut_off:  # party2 reaches the coordinator (by name) and no peer (by address)
            monkeypatch.setenv("grpc_proxy", "http://127.0.0.1:9")
            monkeypatch.setenv("no_grpc_proxy", "localhost")
            port = coord.planned_address.rsplit(":", 1)[1]
            extra = ["--coordinator", f"localhost:{port}"]
        cluster.client(coord, one_label[2], extra)
        assert coord.wait(RUN_TIMEOUT_S) == 0, cluster.describe()
        log = coord.log_path.read_text()
        records = read_audit(audit)
    rounds = [r for r in records if r.rpc == "Round" and r.direction == "request"]
    trained = [r for r in rounds if not r.message().probe]
    assert len(rounds) - len(trained) == K  # the probe: one Round call per party
    if cut_off:
        assert "data plane: relay (--data-plane auto: party party2 cannot reach party0" in log
        assert trained == []  # training (and validation) went through the relay
        assert any(r.rpc in ("Train", "Fuse") for r in records)
    else:
        assert "data plane: direct (--data-plane auto: every party reaches" in log
        assert any(r.message().HasField("evaluation") for r in trained)  # the validation
        assert not any(r.rpc in ("Train", "Fuse", "Backward") for r in records)
