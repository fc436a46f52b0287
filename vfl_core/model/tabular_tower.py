"""Builders of a tabular party's models with the opt-in numeric embeddings and ensembles
(ModelConfig.num_embedding, .ensemble): vfl_core.model.num_embeddings, vfl_core.model.ensemble.
`models.build_representation` and `models.build_head` call these when either is on; with both
off a party's models are built as before, bit for bit."""

from __future__ import annotations

from torch import nn

from vfl_core.errors import ConfigError
from vfl_core.model.ensemble import EnsembleHead, EnsembleTower, member_width
from vfl_core.model.model_config import ModelConfig
from vfl_core.model.num_embeddings import NumericEmbedding, NumericFit
from vfl_core.model.tower import MLPRepresentation, build_seeded, embedding_dim


def extended(config: ModelConfig) -> bool:
    """Whether `config` asks for numeric embeddings or an ensemble."""
    return config.num_embedding != "none" or config.ensemble > 1


def build_tower(
    config: ModelConfig,
    width: int,
    seed: int,
    categorical: tuple[int, ...],
    *,
    numeric: NumericFit | None,
    final_activation: bool,
) -> nn.Module:
    """A tabular party's representation model of `width` values a row (the code columns last)."""
    if config.head == "wide" and config.ensemble > 1:
        raise ConfigError("--ensemble needs --head mlp or linear, not wide")
    if config.num_embedding != "none" and numeric is None:
        raise ConfigError(f"--num-embedding {config.num_embedding} needs the party's training rows")
    member = member_width(config.embed_dim, config.ensemble)

    def mlp(w: int) -> nn.Module:
        return MLPRepresentation(
            w,
            config.hidden,
            member,
            final_activation=final_activation,
            skip=config.head == "wide",
            dropout=config.dropout,
            norm=config.norm,
            dropout_seed=seed,
        )

    def factory() -> nn.Module:
        embed = None
        if config.num_embedding != "none" and numeric is not None:
            embed = NumericEmbedding(numeric, config.num_embedding_dim, config.num_bins)
        dims = tuple(embedding_dim(n, config.categorical_dim) for n in categorical)
        dense = width - len(categorical)
        return EnsembleTower(dense, embed, tuple(categorical), dims, config.ensemble, mlp)

    return build_seeded(seed, factory)


def build_ensemble_head(
    config: ModelConfig, kind: str, outputs: int, seed: int, in_blocks: int
) -> nn.Module:
    """k members' heads (`kind` "linear" or "mlp") on the fused embedding."""
    if kind not in ("linear", "mlp"):
        raise ConfigError(f"--ensemble needs --head mlp or linear, not {kind}")
    member = member_width(config.embed_dim, config.ensemble)
    hidden = config.head_hidden if kind == "mlp" else None
    return build_seeded(
        seed, lambda: EnsembleHead(config.ensemble, in_blocks, member, hidden, outputs)
    )
