"""The architecture settings every party's models are built from (part of TrainConfig, which
re-exports it; torch-free so configs load fast). They live with the models that read them, below
the run's configuration (vfl_core.config), which names the methods."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Representation = Literal["auto", "mlp", "cnn", "resnet18"]
# "auto": "mlp" for a party of tabular features, "linear" for image blocks (the paper's);
# "wide": "mlp" plus a linear path from every party's features to the logits;
# vfl_core.model.models.resolve_head, docs/tabular-defaults.md.
HeadKind = Literal["auto", "linear", "mlp", "wide"]
# Normalisation after each hidden Linear of a tabular party's MLP (before its ReLU).
Norm = Literal["none", "layer", "batch"]
# Embeddings of a tabular party's numeric columns (vfl_core.model.num_embeddings).
NumEmbedding = Literal["none", "ple", "periodic"]


class ModelConfig(BaseModel):
    """Architecture shared by every party. All parties use the same embedding size."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    representation: Representation = "auto"
    embed_dim: int = Field(64, ge=1, le=65536)
    hidden: tuple[int, ...] = (256,)
    head: HeadKind = "auto"
    head_hidden: int = Field(64, ge=1)
    # Tabular party MLPs (docs/tabular-defaults.md, measured): dropout after each hidden ReLU,
    # a normalisation after each hidden Linear, and the width of every categorical column's
    # embedding (0: 1.6 x cardinality^0.56, at most 16; tower.embedding_dim).
    dropout: float = Field(0.0, ge=0, lt=1)
    norm: Norm = "none"
    categorical_dim: int = Field(0, ge=0, le=1024)
    # Opt-in (docs/tabular-defaults.md has what they measured): numeric columns' embeddings
    # ("ple": piecewise-linear on `num_bins` training quantile bins; "periodic"), each
    # `num_embedding_dim` wide, and a TabM-mini ensemble of `ensemble` members sharing the
    # party's MLP (vfl_core.model.ensemble; embed_dim must divide by it). Tabular parties only.
    num_embedding: NumEmbedding = "none"
    num_embedding_dim: int = Field(16, ge=1, le=256)
    num_bins: int = Field(16, ge=2, le=256)
    ensemble: int = Field(1, ge=1, le=64)
    # `linear_lane` more values after each tabular party's embedding, a linear map of its row,
    # and each label party trains a linear head on them: a third predictor the validation may
    # choose (vfl_core.model.linear_lane; 0: none). None (the default): the tables' lane where
    # the model carries one, else none (vfl_core.auto_rounds.resolve).
    linear_lane: int | None = Field(None, ge=0, le=64)


# The lane of a table's tower when ModelConfig.linear_lane is unset (benchmarks/results/tabular.md,
# `tabular-vertibench-linear-lane-rules`): up to 5 classes' logistic regression.
AUTO_LINEAR_LANE = 4


def wire_width(config: ModelConfig) -> int:
    """Values a sample of one representation slot's embedding: embed_dim, and the lane's."""
    return config.embed_dim + (config.linear_lane or 0)


def resolved_lane(config: ModelConfig, tables: bool) -> int:
    """ModelConfig.linear_lane as a run uses it: as given, else AUTO_LINEAR_LANE on `tables`
    (tabular parties, a method of LASER-VFL's shape, feature towers that learn) whose towers
    carry one, else 0."""
    if config.linear_lane is not None:
        return config.linear_lane
    plain = config.ensemble == 1 and config.num_embedding == "none" and config.head != "wide"
    return AUTO_LINEAR_LANE if tables and plain and config.representation in ("auto", "mlp") else 0
