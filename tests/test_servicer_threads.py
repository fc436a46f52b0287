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
