"""Local updates on cached tensors (TrainConfig.local_steps = R; CELU-VFL, Fu et al., PVLDB 2022;
FedBCD, Liu et al., 2022): after its exact update of a round, a party takes R more steps on that
round's batch with the tensors the round left it, so one round trip buys R + 1 updates.

- A party with features re-runs f_k on the round's rows (a fresh E') and applies the gradient
  the other heads sent it that round, each row i weighted by w_i = max(0, cos(E'_i, E_i)), E_i
  its embedding of the row at Embed (`cosine_weights`). The cached gradient was computed at E_i;
  the further f_k has moved the row's embedding from it, the less it is trusted: CELU-VFL's
  instance weighting (its Sec. 4), measured here on the embedding the party can recompute alone.
- A label party also re-trains its heads, and its own f_k through its fresh embedding, on the
  method's loss of the round's batch: the others' embeddings it received that round (stale by
  their local steps; unweighted, as FedBCD), its own fresh one, and the tasks LASER-VFL samples,
  drawn anew at each local step from (seed, round, local step, block) (Stream.LOCAL_TASKS).

Nothing crosses the wire. The tensors live in the round's `Cache`, which the party drops once its
local steps are done (or the round is forgotten): a cached tensor never meets another batch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from vfl_core.methods.party_port import PartyPort
from vfl_core.methods.spec import HeadTask, MethodSpec, Subset
from vfl_core.seeding import Stream

# A local step's learning rate, as a share of the round's exact step's (ModelBank.set_lr): the
# cached gradient and the others' embeddings are stale, so their steps are taken shorter. At the
# table defaults (a quarter of the rows a round, rate 0.005) R = 4 at the full rate cost Credit
# 1.5 accuracy points; at half of it the accuracy of both table workloads was that of R = 0
# (docs/local-updates.md, "What it costs and what it buys"). A deviation from CELU-VFL and
# FedBCD, whose local steps take the exact step's rate.
LOCAL_LR_SCALE = 0.5


class Heads(Protocol):
    """What the local steps use of a party's heads (party_steps.LaserHeads is one): the method
    that samples the tasks and the loss of those tasks."""

    spec: MethodSpec

    def tasks_loss(
        self,
        tasks: list[HeadTask],
        embeddings: Mapping[int, torch.Tensor],
        blocks: Sequence[int],
        target: torch.Tensor,
    ) -> torch.Tensor: ...


# (features, slots) -> the party's embedding of them in training mode, (B, len(slots) * d)
Embed = Callable[[torch.Tensor, list[Subset]], torch.Tensor]


@dataclass
class FuseCache:
    """What a label party's Fuse of the round leaves for its local steps."""

    others: dict[int, torch.Tensor]  # block -> (B, width) the others' embeddings, detached
    blocks: tuple[int, ...]  # the round's participants (a head's input widths follow them)
    label_blocks: tuple[int, ...]  # as the round's Fuse sampled its tasks with them
    unlabelled: tuple[int, ...]
    weight: float = 1.0  # the round's loss weight, as its Fuse had it (party_steps.row_weight)


@dataclass
class Cache:
    """The tensors of one round a party reuses in its local steps, and nothing else."""

    x: torch.Tensor | None  # (B, *feature_shape) its features of the rows; None: labels only
    sent: torch.Tensor | None  # (B, len(slots) * d) its embedding at Embed, detached, undefended
    fuse: FuseCache | None = None  # label party, once it fused the round


def cosine_weights(fresh: torch.Tensor, cached: torch.Tensor) -> torch.Tensor:
    """(B,) weights in [0, 1]: each row's cosine similarity between its fresh and its cached
    embedding, negative ones cut to 0 (the cached gradient points the wrong way there); a row
    whose embedding has not moved (zero rows included) weighs 1."""
    fresh, cached = fresh.detach(), cached.detach()
    cos = torch.nn.functional.cosine_similarity(fresh, cached, dim=1, eps=1e-12)  # (B,)
    same = (fresh == cached).all(dim=1)
    return torch.where(same, torch.ones_like(cos), cos.clamp(0.0, 1.0))


class LocalSteps:
    """One party's local steps on the cache of the round it just finished."""

    def __init__(self, party: PartyPort, heads: Heads, embed: Embed) -> None:
        self.party = party
        self.heads = heads
        self.embed = embed

    @property
    def steps(self) -> int:
        return int(getattr(self.party.config, "local_steps", 0))

    def run(
        self,
        round_id: int,
        rows: np.ndarray,
        slots: list[Subset],
        cache: Cache,
        received: torch.Tensor | None,
        epoch: int,
    ) -> None:
        """R local steps on the round's cache (`received`: the other heads' summed gradient for
        the party's embedding, None if none came); the caller runs them once per round."""
        for step in range(1, self.steps + 1):
            self._step(round_id, step, rows, slots, cache, received, epoch)
        cache.x = cache.sent = cache.fuse = None  # the round's tensors go with it

    def _step(
        self,
        round_id: int,
        step: int,
        rows: np.ndarray,
        slots: list[Subset],
        cache: Cache,
        received: torch.Tensor | None,
        epoch: int,
    ) -> None:
        p = self.party
        models = p.models
        fresh = None if cache.x is None or not slots else self.embed(cache.x, slots)  # (B, w)
        terms: list[torch.Tensor] = []
        opts: list[torch.optim.Optimizer] = []
        if cache.fuse is not None:
            loss, heads = self._heads_loss(round_id, step, rows, cache.fuse, fresh)
            if loss is not None:
                terms.append(loss)
                opts += [models.head_opts[k] for k in heads]
        if fresh is not None and received is not None and cache.sent is not None:
            weights = cosine_weights(fresh, cache.sent)  # (B,)
            # d/dE' of sum_i w_i <G_i, E'_i> is w_i G_i: the cached gradient, weighted per row
            terms.append((weights[:, None] * received * fresh).sum())
        if not terms:
            return
        if fresh is not None:
            opts += [models.rep_opts[k] for k in slots]
        models.set_lr(opts, epoch)
        if LOCAL_LR_SCALE != 1.0:  # the next exact step sets its own rate again (set_lr)
            for opt in opts:
                for group in opt.param_groups:
                    group["lr"] *= LOCAL_LR_SCALE
        for opt in opts:
            opt.zero_grad(set_to_none=True)
        sum(terms[1:], terms[0]).backward()
        for opt in opts:
            opt.step()

    def _heads_loss(
        self,
        round_id: int,
        step: int,
        rows: np.ndarray,
        fuse: FuseCache,
        fresh: torch.Tensor | None,
    ) -> tuple[torch.Tensor | None, list[Subset]]:
        """The label party's sampled loss on the round's batch (the others' cached embeddings,
        its own fresh one) and the heads it trains."""
        p = self.party
        embeddings = dict(fuse.others)
        if fresh is not None:
            embeddings[p.block] = fresh
        tasks = self.heads.spec.fuse_tasks(
            p.block,
            sorted(embeddings),
            p.data.meta.num_blocks,
            fuse.label_blocks,
            p.stream(Stream.LOCAL_TASKS, round_id, step),
            fuse.unlabelled,
        )
        if not tasks:
            return None, []
        keys = sorted({t.head for t in tasks})
        for key in keys:
            p.models.head(key).train()
        target = p.targets(rows)
        return self.heads.tasks_loss(tasks, embeddings, fuse.blocks, target) * fuse.weight, keys
