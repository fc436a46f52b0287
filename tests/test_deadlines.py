"""The deadline policy: which phase's deadline each party call has (vfl_coordinator.config)."""

from __future__ import annotations

import pytest

from vfl_coordinator.config import PSI_S_PER_POINT, Deadlines

D = Deadlines(
    embed=1.0, fuse=2.0, backward=3.0, predict=4.0, align=5.0, shutdown=6.0, checkpoint=7.0
)


@pytest.mark.parametrize(
    ("rpc", "seconds"),
    [
        ("Embed", 1.0),
        ("Fuse", 2.0),
        ("Backward", 3.0),
        ("Predict", 4.0),
        ("Score", 4.0),
        ("IdHashes", 5.0),
        ("Shutdown", 6.0),
        ("Checkpoint", 7.0),
        ("GuestStep", 1.0),
        ("HostStep", 3.0),
        ("OwnerTrain", 2.0),
        ("DlvmDecode", 2.0),
        ("DlvmBackward", 3.0),
    ],
)
def test_given_rpc_when_training_then_its_phase_deadline(rpc: str, seconds: float) -> None:
    assert D.seconds(rpc) == seconds


def test_given_training_phase_rpc_at_inference_then_predict_deadline() -> None:
    assert D.seconds("HostOutput") == 1.0
    assert D.seconds("HostOutput", training=False) == 4.0
    assert D.seconds("DlvmDecode", training=False) == 4.0
    assert D.seconds("Embed", training=False) == 1.0  # inference embeds keep their own


def test_given_psi_points_then_time_per_point_added_to_align() -> None:
    assert D.seconds("PsiBlind", points=1000) == pytest.approx(5.0 + 1000 * PSI_S_PER_POINT)
    assert D.seconds("IdHashes", points=1000) == 5.0  # hashes are not PSI steps


def test_given_pipelined_call_then_its_phases_added_up() -> None:
    assert D.pipelined(embeds=2, fuses=1, backwards=3) == 2 * 1.0 + 2.0 + 3 * 3.0


def test_given_unknown_rpc_then_key_error() -> None:
    with pytest.raises(KeyError):
        D.seconds("Nope")
