"""A client's compute thread runs torch with the thread count the client was given
(`vfl-client --threads`), not the library default a new thread starts with."""

from __future__ import annotations

import pytest
import torch

from vfl_client.servicer import PartyServicer


@pytest.mark.parametrize("threads", [1, 2])
def test_given_threads_when_servicer_computes_then_its_thread_uses_that_count(
    threads: int,
) -> None:
    main_before = torch.get_num_threads()
    servicer = PartyServicer("party0", threads=threads)
    try:
        seen = servicer._worker.submit(torch.get_num_threads).result(timeout=10)
    finally:
        servicer._worker.shutdown()

    assert seen == threads
    assert torch.get_num_threads() == main_before  # the caller's own setting is left alone


def test_given_a_probe_round_when_served_then_the_rounds_turn_is_not_moved() -> None:
    """`--data-plane auto`'s probe is a Round call numbered 0 that is no round of the run: it
    must not count as round 0 handed over, or the run's round 1 (which waits for round 0's
    turn) could reach the compute thread before round 0 and the two run out of order."""
    from vfl_wire.v1 import vfl_pb2

    servicer = PartyServicer("party0", threads=1)
    handed: list[int] = []

    def serve(context, rpc, header, handler, submitted=None):  # the RPC plumbing, not under test
        if submitted is not None:
            submitted()
            handed.append(servicer._submitted)

    class Context:
        def time_remaining(self) -> float:
            return 1.0

    servicer._serve = serve  # type: ignore[method-assign]
    try:
        servicer.Round(vfl_pb2.RoundRequest(round_id=0, probe=True, after=-1), Context())
        assert servicer._submitted == -1 and handed == []
        servicer.Round(vfl_pb2.RoundRequest(round_id=0, after=-1), Context())
        assert servicer._submitted == 0 and handed == [0]
    finally:
        servicer._worker.shutdown()
