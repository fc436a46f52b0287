"""Decoupled VFL (Amalanshu, Sirvi, Inouye, arXiv 2403.03871): the models and the registers.

DVFL trains three tiers, each on its own objective, so that no gradient crosses a party boundary:
- a **guest** (every party, on its feature block) trains an autoencoder on its own rows, all of
  them, labelled or not; every `period` local steps it writes its encoder's activations of the
  step's rows to the hosts' registers, and nothing comes back to it;
- a **host** (a feature-less aggregator; we run one replica in every party process) keeps one
  register per guest and training sample (the latest activation written) and trains its own
  autoencoder on the concatenated registers, replaying them between communication rounds;
- the **label owner** (the lowest label party) trains a classifier on the frozen hosts' outputs
  (their encoders' codes, concatenated) for the rows it has labels of.

This module holds the transport-free pieces: the networks, the registers and the losses. The
tiers' state machines are `vfl_core.methods.dvfl.roles`, the coordinator's schedule
`vfl_core.methods.dvfl.program`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from vfl_core.errors import ProtocolError
from vfl_core.model.models import MLPRepresentation, build_seeded

# A hostile or mistaken coordinator could name any register count: refuse to allocate registers
# beyond this (60 000 samples x 4 guests x 80 floats are 77 MB).
MAX_REGISTER_BYTES = 2**31


class AutoEncoder(nn.Module):
    """MLP encoder in -> hidden -> dim (the code, no final activation) and its mirror image."""

    def __init__(self, in_width: int, hidden: Sequence[int], dim: int) -> None:
        super().__init__()
        self.encoder = MLPRepresentation(in_width, tuple(hidden), dim, final_activation=False)
        back = tuple(reversed(hidden))
        self.decoder = MLPRepresentation(dim, back, in_width, final_activation=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        flat = x.flatten(1)  # (B, in_width)
        code = self.encoder(flat)  # (B, dim)
        return code, self.decoder(code)  # (B, dim), (B, in_width)


def build_autoencoder(in_width: int, hidden: Sequence[int], dim: int, seed: int) -> AutoEncoder:
    """Weights from `seed` alone (the caller's RNG is untouched)."""
    model = build_seeded(seed, lambda: AutoEncoder(in_width, hidden, dim))
    assert isinstance(model, AutoEncoder)
    return model


def build_classifier(in_width: int, hidden: Sequence[int], classes: int, seed: int) -> nn.Module:
    """The owner's MLP: concatenated host codes (B, in_width) -> logits (B, classes)."""
    return build_seeded(
        seed, lambda: MLPRepresentation(in_width, tuple(hidden), classes, final_activation=False)
    )


class Registers:
    """A host's memory of the guests: for each training sample (a key index of the alignment) and
    guest, the activation written last, and whether one was ever written. Unwritten slots read
    as zeros, which is also what a missing guest contributes at inference."""

    def __init__(self, samples: int, guests: int, dim: int, device: torch.device) -> None:
        if samples < 1 or samples * guests * dim * 4 > MAX_REGISTER_BYTES:
            raise ProtocolError(
                f"registers for {samples} samples x {guests} guests x {dim} floats: outside "
                f"1..{MAX_REGISTER_BYTES} bytes"
            )
        self.samples, self.guests, self.dim = samples, guests, dim
        self.values = torch.zeros(samples, guests, dim, device=device)  # (N, G, d)
        self.written = torch.zeros(samples, guests, dtype=torch.bool, device=device)  # (N, G)

    def check_index(self, index: np.ndarray, what: str) -> None:
        check_index(index, self.samples, what)

    def write(self, index: np.ndarray, guest: int, values: torch.Tensor) -> None:
        rows = torch.as_tensor(index, device=self.values.device)
        self.values[rows, guest] = values  # (B, d) into the guest's slot
        self.written[rows, guest] = True

    def filled(self) -> np.ndarray:
        """Key indices with at least one written slot: what the host can replay."""
        return torch.nonzero(self.written.any(dim=1)).flatten().cpu().numpy()

    def inputs(self, index: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, G * d) concatenated registers and (B, G * d) 1.0 where a slot was written."""
        rows = torch.as_tensor(index, device=self.values.device)
        x = self.values[rows].flatten(1)  # (B, G, d) -> (B, G * d)
        mask = self.written[rows].repeat_interleave(self.dim, dim=1).to(x.dtype)  # (B, G * d)
        return x, mask

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"values": self.values.clone(), "written": self.written.clone()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        values, written = state["values"], state["written"]
        if tuple(values.shape) != tuple(self.values.shape) or written.shape != self.written.shape:
            raise ProtocolError(
                f"saved registers {tuple(values.shape)} do not fit {tuple(self.values.shape)}"
            )
        self.values.copy_(values)
        self.written.copy_(written)


def check_index(index: np.ndarray, samples: int, what: str) -> None:
    """A (B,) index of distinct samples among `samples` registers."""
    if index.dtype.kind not in "iu" or index.ndim != 1:
        raise ProtocolError(f"{what}: expected a (B,) integer index, got {index.dtype}")
    if index.size and (index.min() < 0 or index.max() >= samples):
        raise ProtocolError(f"{what}: sample index outside 0..{samples - 1}")
    if len(np.unique(index)) != len(index):
        raise ProtocolError(f"{what}: repeated sample index")


def concat_slots(
    parts: dict[int, torch.Tensor], slots: int, size: int, dim: int, device: torch.device
) -> torch.Tensor:
    """(size, slots * dim): part i in slot i, zeros in the slots of absent parts."""
    out = torch.zeros(size, slots, dim, device=device)
    for slot, part in parts.items():
        out[:, slot] = part  # (size, dim)
    return out.flatten(1)
