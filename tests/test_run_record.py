"""Issue 33 item 6: the run record keeps its facts across a coordinator restart, and the test
table says which parties answered it."""

from __future__ import annotations

from pathlib import Path

from harness import SECRET

from vfl_core.config import ModelConfig, TrainConfig
from vfl_core.data.party_dir import load_party_dir
from vfl_core.inference.metrics import EvalReport
from vfl_core.lifecycle import RunResults
from vfl_core.persistence.checkpoint import check_plain
from vfl_core.training.engine import Federation, Pause
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party

SMALL = ModelConfig(representation="mlp", embed_dim=8, hidden=(16,))


def _federation(party_dirs: list[Path]) -> Federation:
    config = TrainConfig(seed=0, epochs=2, model=SMALL)
    parties = {}
    for d in party_dirs:
        data = load_party_dir(d)
        parties[data.meta.block] = Party(
            f"party{data.meta.block}", data, config, secret=SECRET.encode()
        )
    return Federation(InProcessTransport(parties), config, progress=False)


def test_given_pauses_before_a_coordinator_restart_when_resumed_then_still_listed(
    party_dirs: list[Path],
) -> None:
    fed = _federation(party_dirs)
    fed.align()
    fed.pauses = [Pause(round_id=12, epoch=0, seconds=8.5, resumed=True)]
    saved = fed.snapshot()
    check_plain(saved)  # it goes into a torch.load(weights_only=True) checkpoint
    again = _federation(party_dirs)
    again.align()
    again.restore(saved)
    assert again.pauses == fed.pauses


def test_given_test_report_when_written_then_results_name_the_live_blocks(
    party_dirs: list[Path],
) -> None:
    fed = _federation(party_dirs)
    fed.align()
    report = EvalReport()
    report.count_answers([0, 1, 2], [0, 1, 2])
    report.count_answers([0, 1, 2], [0, 2])  # block 1 missed a batch: not live throughout
    run = RunResults(
        kind="coordinator",
        run_id="r",
        task="classification",
        config=fed.config,
        epochs=[],
        reports={None: report},
        subsets={},
        transitions=[],
        transition_counts={},
        pauses=[],
        faults=None,
        rounds=0,
        method=None,
    )
    assert run.to_json()["test"]["live_blocks"] == [0, 2]


class _Recording(InProcessTransport):
    asked: list[list[int]]

    def checkpoint(self, round_id: int, blocks: list[int]) -> set[int]:
        self.asked.append(list(blocks))
        return set(blocks)


def test_given_party_left_out_of_alignment_when_checkpointing_then_it_is_not_asked(
    party_dirs: list[Path],
) -> None:
    """Its state is that of the last round it took part in: a file named by this round would
    claim otherwise (a left-out client wrote rounds 2519-2705 holding round 599)."""
    fed = _federation(party_dirs)
    transport = _Recording(fed.transport.parties)  # type: ignore[attr-defined]
    transport.asked = []
    fed.transport = transport
    fed.align()
    fed.unaligned = {1}
    fed.round_id = 40
    assert fed.checkpoint() == {0, 2, 3}
    assert transport.asked == [[0, 2, 3]]
