"""The keys of a party's model slots (vfl_core.model.model_bank).

A key is a sorted tuple of blocks: `SHARED` (the empty tuple) for a party's one shared
representation model f_k or head g_k, or a subset of blocks for the combinatorial baseline's
per-subset models. The methods name their subsets with the same type.
"""

from __future__ import annotations

Subset = tuple[int, ...]

SHARED: Subset = ()  # the slot key of a party's one shared representation model / head
# The key of a LASER-VFL label party's second head, on the zero-filled concatenation of the present
# embeddings (TrainConfig.concat_head); no subset of blocks has a negative block.
CONCAT_HEAD: Subset = (-1,)
# The key of its linear head on the towers' lanes (ModelConfig.linear_lane).
LINEAR_HEAD: Subset = (-2,)


def key_name(key: Subset) -> str:
    """A slot key's wire/file name: its blocks joined by commas (`SHARED` is the empty name)."""
    return ",".join(map(str, key))


def name_key(name: str) -> Subset:
    return tuple(int(x) for x in name.split(",")) if name else SHARED
