"""A centralised reference for a federation's observed sets: one model in one process on the
joined feature blocks of a set S, trained on every training sample whose blocks S are all
observed (with its label) and tested on the test samples observed by exactly S.

The model is a party's representation model on the concatenated blocks of S followed by a
linear head (`vfl_core.model.models`), trained with the run's optimiser settings, epochs, batch size
and class balancing, so the only difference from the federation is where the features are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from vfl_core.config import TrainConfig
from vfl_core.data.party_dir import PartyData
from vfl_core.inference.metrics import accuracy_from_confusion, f1_from_confusion
from vfl_core.model.models import build_head, build_representation
from vfl_core.seeding import Stream, derive_seed, rng

Joined = tuple[np.ndarray, np.ndarray]  # (n, sum of block widths) float32, (n,) int64 labels


def observed_sets(parties: Sequence[PartyData], split: str) -> dict[str, tuple[int, ...]]:
    """Sample ID -> the blocks holding its features in `split`."""
    holders: dict[str, list[int]] = {}
    for party in sorted(parties, key=lambda p: p.meta.block):
        s = party.splits[split]
        for sample in s.ids[: len(s.features)].tolist():
            holders.setdefault(sample, []).append(party.meta.block)
    return {i: tuple(b) for i, b in holders.items()}


def joined(parties: Sequence[PartyData], split: str, blocks: Sequence[int], exact: bool) -> Joined:
    """Features of `blocks` side by side and the labels (from any label party, label-only rows
    included), for the samples observed by every block of `blocks` (`exact`: by those only)."""
    sets = observed_sets(parties, split)
    wanted = set(blocks)
    ids = sorted(i for i, s in sets.items() if (set(s) == wanted if exact else wanted <= set(s)))
    labels: dict[str, int] = {}
    for party in parties:
        s = party.splits[split]
        if s.labels is not None:
            labels.update(zip(s.ids.tolist(), s.labels.tolist(), strict=True))
    ids = [i for i in ids if i in labels]
    by_block = {p.meta.block: p.splits[split] for p in parties}
    columns = []
    for b in sorted(blocks):
        row = {sample: r for r, sample in enumerate(by_block[b].ids.tolist())}
        columns.append(by_block[b].features[[row[i] for i in ids]].reshape(len(ids), -1))
    x = np.concatenate(columns, axis=1) if ids else np.zeros((0, 0), np.float32)
    return x.astype(np.float32), np.array([labels[i] for i in ids], dtype=np.int64)


def train_model(data: Joined, train: TrainConfig, num_classes: int, key: int) -> nn.Module:
    """The party model on the joined blocks, trained like the federation (one seed: init and
    batch order)."""
    x, y = (torch.from_numpy(a) for a in data)
    seed = derive_seed(train.seed, Stream.INIT_REPRESENTATION, 100 + key)
    model = nn.Sequential(
        build_representation(train.model, (x.shape[1],), seed),
        build_head(train.model, num_classes, seed + 1),
    )
    lr = train.learning_rate(False)
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=train.weight_decay)
    weights = None
    if train.balance == "resample":
        counts = np.bincount(data[1], minlength=num_classes).astype(np.float64)
        weights = (1.0 / np.maximum(counts, 1.0))[data[1]]
        weights /= weights.sum()
    model.train()
    for epoch in range(train.epochs):
        gen = rng(train.seed, Stream.PLAN, 1000 + key, epoch)
        order = (
            gen.permutation(len(y)) if weights is None else gen.choice(len(y), len(y), p=weights)
        )
        size = train.batch_rows(len(order))
        for start in range(0, len(order), size):
            batch = torch.from_numpy(order[start : start + size])
            opt.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
            opt.step()
    return model.eval()


def evaluate(model: nn.Module, data: Joined, num_classes: int) -> dict[str, Any]:
    """Samples, accuracy and F1 (the federation's definitions, from a confusion matrix)."""
    x, y = data
    with torch.no_grad():
        predicted = model(torch.from_numpy(x)).argmax(dim=1).numpy()
    confusion = np.zeros((num_classes, num_classes), dtype=np.int64)
    np.add.at(confusion, (y, predicted), 1)
    return {
        "samples": len(y),
        "accuracy": accuracy_from_confusion(confusion) if len(y) else None,
        "f1": f1_from_confusion(confusion) if len(y) else None,
    }
