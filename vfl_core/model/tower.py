"""The MLP tower every tabular party builds on (`MLPRepresentation`, seeded construction,
categorical embedding widths) and the layers it may put after each hidden Linear: a
normalisation (ModelConfig.norm; docs/tabular-defaults.md has what each measured) and a seeded
dropout (ModelConfig.dropout)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

from vfl_core.errors import ConfigError
from vfl_core.seeding import Stream, derive_seed


class RowSafeBatchNorm(nn.BatchNorm1d):
    """BatchNorm1d that normalises a training batch of one row by its running statistics
    instead of refusing it: a party may hold a single row of a round's batch."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and x.shape[0] == 1:
            return nn.functional.batch_norm(
                x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps
            )
        return super().forward(x)  # (B, width)


def norm_layers(kind: str, width: int) -> list[nn.Module]:
    """The layers of `kind` ("none", "layer" or "batch") for a hidden layer of `width`."""
    if kind == "none":
        return []
    if kind not in ("layer", "batch"):
        raise ConfigError(f"unknown model.norm {kind!r}; expected none, layer or batch")
    return [nn.LayerNorm(width) if kind == "layer" else RowSafeBatchNorm(width)]


class SeededDropout(nn.Dropout):
    """nn.Dropout whose masks come from its own seed and a count of the masks drawn, not from
    torch's global generator: a run's masks are then fixed by its seed alone, whatever else ran
    in the process before (with several parties, or runs, in one process), the same in process
    and over gRPC, and the same after a resume (the count is in the state dict)."""

    def __init__(self, p: float, seed: int, layer: int = 0) -> None:
        super().__init__(p)
        self.seed, self.layer = seed, layer
        self.draws = 0  # masks drawn so far, in training

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        generator = torch.Generator(device=x.device)
        generator.manual_seed(derive_seed(self.seed, Stream.TOWER_DROPOUT, self.layer, self.draws))
        self.draws += 1
        draws = torch.rand(x.shape, generator=generator, device=x.device, dtype=x.dtype)
        return x * (draws >= self.p) / (1.0 - self.p)  # nn.Dropout's scaling of what is kept

    def get_extra_state(self) -> dict:
        return {"draws": self.draws}

    def set_extra_state(self, state: dict) -> None:
        self.draws = int(state["draws"])

    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args: object) -> None:
        # a state saved before the masks were seeded has no count: start it at 0 (strict loads
        # would otherwise refuse every such checkpoint and serving bundle)
        state_dict.setdefault(prefix + "_extra_state", {"draws": 0})
        super()._load_from_state_dict(state_dict, prefix, *args)


_MAX_SEED: int = 2**63 - 1
_EMBEDDING_MAX_DIM: int = 16


@contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """Seed torch's CPU RNG for the duration of the block, then restore the caller's state."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= _MAX_SEED:
        raise ConfigError(f"model seed must be an integer in [0, 2**63 - 1], got {seed!r}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def build_seeded(seed: int, factory: Callable[[], nn.Module]) -> nn.Module:
    with _seeded(seed):
        return factory()


class MLPRepresentation(nn.Module):
    """Flatten, then Linear/ReLU through ``hidden``, then Linear to ``embed_dim``.

    ``final_activation`` adds a ReLU after the last Linear (non-negative embeddings). The reference
    code has none; the builder passes ``DEFAULT_FINAL_ACTIVATION`` (False).
    """

    def __init__(
        self,
        in_features: int,
        hidden: tuple[int, ...],
        embed_dim: int,
        *,
        final_activation: bool,
        skip: bool = False,
        dropout: float = 0.0,
        norm: str = "none",
        dropout_seed: int = 0,
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = in_features
        for k, size in enumerate(hidden):
            # LayerNorm/BatchNorm start at ones and zeros and Dropout has no weights: the
            # Linear layers draw the same initial weights with or without them.
            layers += [nn.Linear(width, size), *norm_layers(norm, size), nn.ReLU()]
            layers += [SeededDropout(dropout, dropout_seed, k)] if dropout else []
            width = size
        layers.append(nn.Linear(width, embed_dim))
        if final_activation and not skip:
            layers.append(nn.ReLU())
        self.net = nn.Sequential(*layers)
        # built after `net`, so that `net` has the same initial weights with or without it
        self.skip = nn.Linear(in_features, embed_dim, bias=False) if skip else None
        self.final_activation = final_activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.flatten(1)  # (B, F) or (B, C*H*W)
        out = self.net(x)  # (B, embed_dim)
        if self.skip is None:
            return out
        out = out + self.skip(x)  # the linear path beside the MLP ("wide and deep")
        return torch.relu(out) if self.final_activation else out


def embedding_dim(cardinality: int, fixed: int = 0) -> int:
    """Width of a categorical column's embedding: `fixed` (model.categorical_dim) if set, else
    growing slowly with its cardinality (the fast.ai rule of thumb 1.6 * n^0.56), capped at 16."""
    if fixed:
        return fixed
    return max(1, min(_EMBEDDING_MAX_DIM, round(1.6 * cardinality**0.56)))
