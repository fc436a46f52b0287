"""Deterministic random streams derived from one seed.

Every random choice in a run (data split, missingness, batch plan, task samples, initial weights)
draws from a stream named by (seed, purpose, ...), so one seed reproduces the run in any transport
and any process layout.
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np


class Stream(IntEnum):
    """Purposes; their values are part of the reproducibility contract, never renumber them."""

    INIT_REPRESENTATION = 1
    INIT_HEAD = 2
    PLAN = 3
    TASKS = 4
    BALANCE = 5
    SPLIT = 6
    MISSING_TRAIN = 7
    MISSING_TEST = 8
    NONUNIFORM = 9
    EVAL_RANDOM = 10
    FAULTS = 11  # injected party failures and lost messages (vfl_core.training.faults)
    LABELS = 21  # which training samples keep their label (vfl prepare --labels)
    # initial weights of the latent-variable VFL's networks (vfl_core.methods.dlvm.models)
    DLVM_INIT = 22
    DLVM_NOISE = 23  # its importance samples of h and z (vfl_core.methods.dlvm.sampling)
    # Decoupled VFL (vfl_core.methods.dvfl.nets), numbered apart so other methods' streams can grow
    # below.
    DVFL_INIT_HOST = 40  # a host's autoencoder
    DVFL_INIT_OWNER = 41  # the label owner's classifier
    DVFL_REPLAY = 42  # the samples a host replays from its registers
    DVFL_OWNER_PLAN = 43  # the owner's batches over its labelled rows, per owner epoch
    # the experts a training step leaves out of its posterior (vfl_core.methods.dlvm.sampling)
    DLVM_DROPOUT = 25
    VALIDATION = 24  # training samples held out for early stopping (vfl_core.training.early_stop)
    ALIGNED_LABELS = 26  # the labelled samples made fully aligned (vfl_core.data.prepare)
    # a label party's task samples in its local steps (vfl_core.methods.laser.local_steps)
    LOCAL_TASKS = 27
    # the label-leak defences of a party (vfl_core.privacy.guards)
    PRIVACY_GRADIENT = 50  # noise on the gradients a label party sends
    PRIVACY_EMBEDDING = 51  # noise on the training embeddings a party sends
    PRIVACY_LABELS = 52  # randomised response on a label party's training labels
    PRIVACY_SCORES = 53  # the randomised-response labels a label party scores with
    PRIVACY_ROWS = 54  # a row's gradient noise, the same in every epoch (per-row defences)
    # a feature-only party's tower trained on its own rows (vfl_core.privacy.pretrain)
    PRIVACY_PRETRAIN = 55
    # a feature-only party's fixed orthogonal tower (vfl_core.privacy.private_tower)
    PRIVACY_TOWER = 56
    TOWER_DROPOUT = 60  # a party MLP's dropout masks (vfl_core.model.tower.SeededDropout)


def derive_seed(seed: int, stream: Stream, *parts: int) -> int:
    """A 63-bit seed for `stream`, independent of every other (seed, stream, parts)."""
    entropy = [
        seed & 0xFFFFFFFF,
        seed >> 32 & 0xFFFFFFFF,
        int(stream),
        *(p & 0xFFFFFFFF for p in parts),
    ]
    state = np.random.SeedSequence(entropy).generate_state(2, np.uint32)
    return (int(state[0]) << 31) ^ int(state[1])


def rng(seed: int, stream: Stream, *parts: int) -> np.random.Generator:
    return np.random.default_rng(derive_seed(seed, stream, *parts))
