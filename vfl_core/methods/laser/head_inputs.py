"""What a party's heads are fed (LASER-VFL's steps and its baselines'): the mean of a subset's
embeddings, or a concatenation, from the embeddings as they arrive on the wire."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from vfl_core.methods.laser.objective import fuse_mean
from vfl_core.methods.party_port import PartyPort
from vfl_core.methods.spec import CONCAT_HEAD, LINEAR_HEAD, Subset
from vfl_core.model.model_config import wire_width


class HeadInputs:
    """A party's heads' inputs, and the width of its blocks' embeddings on the wire."""

    def __init__(self, party: PartyPort) -> None:
        self.party = party
        self.spec = party.spec

    def fused(
        self,
        head: Subset,
        embeddings: Mapping[int, torch.Tensor],
        subset: Subset,
        blocks: Sequence[int],
    ) -> torch.Tensor:
        """A head's input: the mean of the subset's embeddings (laser.fuse_mean), or a
        concatenation: of all K blocks, zeros for the absent (svfl, plug, LASER-VFL's CONCAT_HEAD
        and LINEAR_HEAD), or of the subset's own slot of each member (combinatorial)."""
        if not self.spec.concatenates and head not in (CONCAT_HEAD, LINEAR_HEAD):
            return fuse_mean(embeddings, subset)  # (B, d)
        d = wire_width(self.party.config.model)
        if self.spec.fusion == "concat_slots":
            parts = [self._slot(embeddings[b], b, head, blocks) for b in sorted(subset)]
        else:
            size = next(iter(embeddings.values())).shape[0]
            zeros = torch.zeros(size, d, device=self.party.device)
            num_blocks = self.party.data.meta.num_blocks
            parts = [embeddings[b] if b in subset else zeros for b in range(num_blocks)]
        return torch.cat(parts, dim=1)  # (B, n * d)

    def _slot(
        self, embedding: torch.Tensor, block: int, key: Subset, blocks: Sequence[int]
    ) -> torch.Tensor:
        d = self.party.config.model.embed_dim
        i = self.spec.slot_keys(block, blocks).index(key)
        return embedding[:, i * d : (i + 1) * d]  # (B, d)

    def width(self, block: int, blocks: Sequence[int]) -> int:
        """Floats per sample in the Embed answer of `block` when `blocks` take part."""
        return len(self.spec.slot_keys(block, blocks)) * wire_width(self.party.config.model)
