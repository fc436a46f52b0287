"""The `stale` split-learning baseline's memory: the last embedding of each training sample.

When a party fails in a round, the head party of the `stale` method replaces its embedding with
the one it last received from that party for the same sample (an earlier epoch), as split-learning
systems with embedding caches do. A sample never seen from that party gets zeros, which makes the
method zero-fill until the cache warms up. The cache lives at the head party only, in the memory
of its device, and is not checkpointed: after a restart it warms up again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch


class StaleEmbeddings:
    def __init__(self, rows: int, width: int, device: torch.device) -> None:
        self.rows = rows
        self.width = width
        self.device = device
        self._cache: dict[int, torch.Tensor] = {}  # block -> (rows, width), zeros when unseen

    def remember(self, rows: np.ndarray, embeddings: Mapping[int, torch.Tensor]) -> None:
        index = torch.as_tensor(rows, device=self.device)
        for block, e in embeddings.items():
            self._table(block)[index] = e.detach()

    def recall(self, rows: np.ndarray, blocks: Sequence[int]) -> dict[int, torch.Tensor]:
        """The remembered embeddings of these rows for each block (no gradient flows back)."""
        index = torch.as_tensor(rows, device=self.device)
        return {b: self._table(b)[index] for b in blocks}

    def _table(self, block: int) -> torch.Tensor:
        if block not in self._cache:
            self._cache[block] = torch.zeros(self.rows, self.width, device=self.device)
        return self._cache[block]
