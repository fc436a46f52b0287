"""The end of a run reaches a party that missed it: one down, or restarting, as the run ended.

Before, the coordinator told the parties it knew to be alive and exited; a party restarted just
then (a chaos schedule of kills and restarts found it) waited for the gone coordinator for its
whole --register-timeout (300 s by default) before it stopped. Now the coordinator waits up to
--farewell seconds for such a party to register again and tells it (vfl_coordinator.runner).
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import pytest
from harness import Cluster, prepare_digits

from vfl_coordinator.registry import Registry
from vfl_coordinator.runner import _farewell
from vfl_core.protocol import PartyInfo

FAREWELL_S = 120.0  # generous: the restarted client imports torch on a loaded machine


@pytest.fixture(scope="module")
def two_parties(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return prepare_digits(tmp_path_factory.getbasetemp(), p_miss=0.0, seed=0, clients=2)


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["kill", "freeze"])
def test_given_party_lost_as_the_run_ends_when_back_then_it_is_told_and_exits(
    cluster: Cluster, two_parties: list[Path], tmp_path: Path, fault: str
) -> None:
    """kill: its new process starts only after the run ended without it; freeze: SIGSTOPped
    during training, thawed after the run ended (same process, same lease: a heartbeat)."""
    ckpt = tmp_path / "ckpt"
    extra = ["--batch-size", "16", "--checkpoint-every", "50"]
    extra += ["--checkpoint-dir", str(ckpt / "coordinator"), "--farewell", str(FAREWELL_S)]
    coord, clients = cluster.federation(
        two_parties,
        epochs=3,
        deadline=2.0,
        extra=extra,
        client_extra=lambda d: ["--checkpoint-dir", str(ckpt / d.name)],
    )
    victim = next(c for c in clients if c.block == 1)
    cluster.wait_rounds(coord, 60, 120)
    victim.signal(signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
    if fault == "kill":
        assert victim.wait(10) == -signal.SIGKILL
    cluster.wait_for(
        lambda: "did not hear that the run ended" in coord.log(), 180, "the coordinator's farewell"
    )
    assert "block(s) 1 did not hear" in coord.log()
    if fault == "kill":
        victim = cluster.restart(victim)
    else:
        victim.signal(signal.SIGCONT)
    back = time.monotonic()
    assert coord.wait(FAREWELL_S) == 0, cluster.describe()
    assert time.monotonic() - back < FAREWELL_S - 10, "the coordinator waited out --farewell"
    assert victim.wait(30) == 0, cluster.describe()
    assert "block 1 registered again and was told: run finished" in coord.log()
    assert "client stopped: run finished" in victim.log()
    log = victim.log()
    assert "coordinator unreachable for" not in log, "it gave up on the coordinator"
    if fault == "freeze" and "coordinator unreachable (" in log:
        # A process thawed after the run may find the heartbeat it had in flight failed (its
        # connection closed or its deadline past while it was stopped): one failed call, then
        # the next reaches the coordinator, which tells it. What it must not do is wait out
        # --register-timeout, which the line above and its prompt exit rule out.
        after = log[log.index("coordinator unreachable (") :]
        assert "coordinator reachable again" in after, log
    else:
        assert "coordinator unreachable" not in log
    survivor = next(c for c in clients if c.block == 0)
    assert survivor.wait(30) == 0 and "client stopped: run finished" in survivor.log()


class _Transport:
    """Records the Shutdown calls `_farewell` makes; a block in `deaf` does not answer."""

    def __init__(self, deaf: frozenset[int] = frozenset()) -> None:
        self.calls: list[int] = []
        self.deaf = set(deaf)

    def shutdown(self, blocks, reason: str) -> set[int]:
        blocks = list(blocks)
        self.calls += blocks
        return {b for b in blocks if b not in self.deaf}


def _info(block: int) -> PartyInfo:
    return PartyInfo(
        party_id=f"party{block}",
        block=block,
        num_blocks=2,
        feature_shape=(4,),
        num_classes=2,
        dataset="t",
        samples={"train": 10},
        has_labels=True,
    )


def _registry() -> Registry:
    registry = Registry(2)
    for block in (0, 1):
        registry.register(_info(block), f"127.0.0.1:{5000 + block}")
    return registry


def test_given_every_party_told_when_run_ends_then_no_wait() -> None:
    transport = _Transport()
    start = time.monotonic()
    _farewell(_registry(), transport, {0, 1}, "run finished", 30.0)  # type: ignore[arg-type]
    assert transport.calls == [] and time.monotonic() - start < 1.0


def test_given_farewell_zero_when_a_party_missed_the_end_then_no_wait() -> None:
    transport = _Transport()
    start = time.monotonic()
    _farewell(_registry(), transport, {0}, "run finished", 0.0)  # type: ignore[arg-type]
    assert transport.calls == [] and time.monotonic() - start < 1.0


def test_given_party_that_never_returns_when_farewell_then_waits_its_seconds_only() -> None:
    transport = _Transport()
    start = time.monotonic()
    _farewell(_registry(), transport, {0}, "run finished", 0.5)  # type: ignore[arg-type]
    assert transport.calls == [] and 0.5 <= time.monotonic() - start < 2.0


def test_given_party_restarted_when_its_new_process_registers_then_told_at_once() -> None:
    registry, transport = _registry(), _Transport()
    threading.Timer(0.3, registry.register, (_info(1), "127.0.0.1:6001")).start()  # new address
    start = time.monotonic()
    _farewell(registry, transport, {0}, "run finished", 30.0)  # type: ignore[arg-type]
    assert transport.calls == [1] and time.monotonic() - start < 5.0


def test_given_party_frozen_at_the_end_when_its_heartbeat_comes_then_told() -> None:
    """A thawed process heartbeats as before (same address and lease): no new generation, and
    a farewell that waited for one let it wait out its --register-timeout (a chaos schedule
    froze a party across the end of the run)."""
    registry, transport = _registry(), _Transport()
    lease = registry.register(_info(1), "127.0.0.1:5001")[1]
    threading.Timer(0.3, registry.register, (_info(1), "127.0.0.1:5001", True, lease)).start()
    _farewell(registry, transport, {0}, "run finished", 30.0)  # type: ignore[arg-type]
    assert transport.calls == [1]


def test_given_party_that_registers_but_misses_the_call_then_told_at_its_next_heartbeat() -> None:
    registry, transport = _registry(), _Transport(deaf=frozenset({1}))

    def come_back() -> None:
        lease = registry.register(_info(1), "127.0.0.1:6001")[1]
        time.sleep(0.3)
        transport.deaf.clear()
        registry.register(_info(1), "127.0.0.1:6001", True, lease)

    threading.Timer(0.2, come_back).start()
    _farewell(registry, transport, {0}, "run finished", 30.0)  # type: ignore[arg-type]
    assert transport.calls == [1, 1]


def test_given_party_resynchronising_when_it_registers_then_told_only_once_synced() -> None:
    """A new process registers first unsynchronised (rolling back to its checkpoint), when the
    coordinator could not call it yet."""
    registry, transport = _registry(), _Transport()

    def come_back() -> None:
        lease = registry.register(_info(1), "127.0.0.1:6001", False)[1]
        time.sleep(0.3)
        assert transport.calls == []
        registry.register(_info(1), "127.0.0.1:6001", True, lease)

    threading.Timer(0.2, come_back).start()
    _farewell(registry, transport, {0}, "run finished", 30.0)  # type: ignore[arg-type]
    assert transport.calls == [1]
