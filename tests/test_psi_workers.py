"""The PSI worker pool (vfl_core.training.psi_workers): started once per process and kept, alive
after the thread that first used it ends, sized by VFL_PSI_WORKERS."""

from __future__ import annotations

import hashlib
import os
import threading

import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from vfl_core.errors import ConfigError
from vfl_core.training import psi, psi_workers


def _key(processes: int) -> psi.PsiKey:
    secret = hashlib.sha256(b"pool").digest()
    return psi.PsiKey(X25519PrivateKey.from_private_bytes(secret), processes=processes)


def _stat(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the command name (state, parent pid, ...); [] if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return []
    return stat[stat.rindex(")") + 2 :].split()


def _alive(pid: int) -> bool:
    fields = _stat(pid)
    return bool(fields) and fields[0] != "Z"


def test_given_large_lists_when_multiplied_one_after_another_then_one_pool_serves_them_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first large list starts the workers, from a thread that then ends; later lists, from
    another thread, reuse the same workers (none started per call, none killed with the first
    caller's thread) and the points are those of one process."""
    monkeypatch.setattr(psi, "PARALLEL_MIN_POINTS", 10)
    points = [psi.id_point(i) for i in range(50)]
    expected = _key(1).apply(points)
    got: list[list[bytes]] = []
    first = threading.Thread(target=lambda: got.append(_key(3).apply(points)))
    first.start()
    first.join()
    pids = psi_workers.worker_pids(3)
    assert len(pids) == 3
    assert got == [expected]
    assert _key(3).apply(points) == expected
    assert _key(3).blind(list(range(50))) == expected
    assert psi_workers.worker_pids(3) == pids
    assert all(_alive(pid) for pid in pids)
    assert all(int(_stat(pid)[1]) == os.getpid() for pid in pids)  # our children


def test_given_psi_workers_env_when_read_then_its_count_or_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(psi_workers.ENV, "1")
    assert psi_workers.workers() == 1
    assert psi.PsiKey().processes == 1
    monkeypatch.setenv(psi_workers.ENV, " 3 ")
    assert psi_workers.workers() == 3
    for bad in ("0", "-2", "two", "1.5"):
        monkeypatch.setenv(psi_workers.ENV, bad)
        with pytest.raises(ConfigError, match="VFL_PSI_WORKERS"):
            psi_workers.workers()
    monkeypatch.delenv(psi_workers.ENV)
    assert psi_workers.workers() == len(os.sched_getaffinity(0))


def test_given_parties_sharing_the_host_when_sized_then_they_split_its_cores(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A client whose coordinator is on its host shares the cores with the other K - 1 parties
    (vfl_client.runner calls share_cores(K)); VFL_PSI_WORKERS still decides when given."""
    from vfl_client.runner import coordinator_on_this_host

    assert coordinator_on_this_host("127.0.0.1:50051") and coordinator_on_this_host("[::1]:1")
    assert coordinator_on_this_host("localhost:7") and not coordinator_on_this_host("10.0.0.2:7")
    monkeypatch.delenv(psi_workers.ENV, raising=False)
    monkeypatch.setattr(psi_workers.os, "sched_getaffinity", lambda _: set(range(16)))
    monkeypatch.setattr(psi_workers, "_sharers", 1)
    assert psi_workers.workers() == 16
    psi_workers.share_cores(4)
    assert psi_workers.workers() == 4
    psi_workers.share_cores(16)
    assert psi_workers.workers() == 1
    psi_workers.share_cores(40)
    assert psi_workers.workers() == 1
    monkeypatch.setenv(psi_workers.ENV, "3")
    assert psi_workers.workers() == 3
