"""The order of a party's calls on the direct plane with --staleness and --overlap-validation:
the first call a party gets after a validation that left ahead of it runs after that
validation (RoundCall.after_validation), whatever kind of call it is.

A checkpoint round that is an epoch's first round ends the block sent ahead at the epoch
before: on 9eba448 that block's records were left unyielded and the run failed ("the direct
rounds drained with steps unreported"), on the tables' defaults with --checkpoint-every.

On 9eba448 a checkpoint round inside the next epoch's first block (the tables' defaults with
--checkpoint-every) ended that block with a steps-only drain named after the party's last
round, not after the validation sent before it: over gRPC the drain and the validation were
then both released when that round was handed over, and either the drain stepped the
epoch's last rounds before the validation read the towers, or (the validation first, which
hands over an earlier round id) the drain waited out the servicer's turn wait, a second per
checkpoint (tests/test_direct_stale_faults.py showed it). In process the transport runs calls
in the order they leave, so the numbers match either way: this checks the order they name.
"""

from __future__ import annotations

from pathlib import Path

from test_epoch_ahead import Recording, _parties

from vfl_core.config import TrainConfig
from vfl_core.methods.outcomes import RoundRecord
from vfl_core.protocol import RoundCall
from vfl_core.training.engine import Federation


def test_given_a_checkpoint_in_the_block_sent_ahead_when_it_drains_then_after_the_validation(
    tmp_path: Path,
) -> None:
    train = TrainConfig(
        seed=0, epochs=3, data_plane="direct", staleness=3, overlap_validation=True,
        early_stop_patience=3, batch_size=256,
    )  # fmt: skip
    parties = _parties(tmp_path, train)
    transport = Recording(parties)
    # a checkpoint every 3 rounds: each epoch's next one falls in the next epoch's first block
    records: list[RoundRecord] = []
    fed = Federation(transport, train, progress=False, checkpoint_every=3, on_round=records.append)
    fed.align()
    fed.train()
    # every round's record once (on 9eba448 the run failed at round 20, a checkpoint round and
    # the first of an epoch: the block sent ahead was collected by the epoch before, and the
    # epoch's run never gave its record)
    assert [r.round_id for r in records] == list(range(fed.round_id))

    followed: list[tuple[RoundCall, RoundCall]] = []  # (a validation, the party's next call)
    last: dict[int, RoundCall] = {}
    for calls in transport.calls:
        for block, call in calls.items():
            before = last.get(block)
            if call.evaluation is not None and call.after < 0:
                continue  # an evaluation once the rounds are over (the test split, the choice)
            if before is not None and before.evaluation is not None:
                followed.append((before, call))
            last[block] = call
    drains = [(v, c) for v, c in followed if c.steps_after]
    assert drains, "no drain followed a validation: the schedule this test is about changed"
    for validation, call in followed:
        assert call.after_validation and call.after == validation.round_id, (validation, call)
