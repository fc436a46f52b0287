"""Per-party networks: representation models f_k and fusion heads g_k.

Party k owns one feature block. Its representation model maps a batch (B, *feature_shape) to an
embedding (B, embed_dim); its head maps the MEAN of several parties' embeddings, (B, embed_dim),
to class logits (B, num_classes). The mean is taken by the caller, not here.

Every builder initialises its weights from an explicit seed inside ``torch.random.fork_rng``, so
building a model never moves the caller's global RNG and the same seed always gives bit-identical
parameters.

Final activation of the representation model: the LASER-VFL reference code
(github.com/Valdeira/LASER-VFL, ``models/mlp.py``, ``models/resnet18.py``) ends every
representation model with a plain Linear layer and no ReLU, e.g. Credit is
``5 -> Linear 10 -> ReLU -> Linear 10 -> ReLU -> Linear 10``. So the builder's default is
``final_activation=False`` (embeddings may be negative). Pass ``final_activation=True`` to
``build_representation`` to get non-negative embeddings instead.
"""

from __future__ import annotations

import logging
import math

import torch
from torch import nn

from vfl_core.errors import ConfigError
from vfl_core.model.model_config import ModelConfig
from vfl_core.model.num_embeddings import NumericFit
from vfl_core.model.tower import (
    MLPRepresentation,
    build_seeded,
    embedding_dim,
)

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_FINAL_ACTIVATION",
    "BasicBlock",
    "CNNRepresentation",
    "MLPRepresentation",
    "ResNet18Representation",
    "TabularRepresentation",
    "WideHead",
    "build_head",
    "build_representation",
    "resolve_head",
    "resolve_representation",
]

# Matches the reference code: no ReLU after the last layer of f_k (see the module docstring).
DEFAULT_FINAL_ACTIVATION: bool = False

_CNN_CHANNELS: tuple[int, int] = (32, 64)
_CNN_POOL_GRID: tuple[int, int] = (2, 2)
_CNN_DEFAULT_HIDDEN: int = 128
# Blocks whose smaller side is at least this get one 2x2 max-pool between the two convolutions,
# which quarters the second convolution's cost (28x28 MNIST, 16x16 CIFAR quadrants).
_CNN_DOWNSAMPLE_MIN_SIDE: int = 8
_RESNET_WIDTHS: tuple[int, int, int, int] = (64, 128, 256, 512)
_RESNET_DEPTHS: tuple[int, int, int, int] = (2, 2, 2, 2)


# --------------------------------------------------------------------------------------------
# Deterministic construction
# --------------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------------
# Representation models (build_seeded, MLPRepresentation and embedding_dim live in
# vfl_core.model.tower, which the tabular towers build on too)
# --------------------------------------------------------------------------------------------


class TabularRepresentation(nn.Module):
    """A table row whose last ``len(cardinalities)`` values are categorical codes: each code
    column goes through its own learned embedding, the embeddings are concatenated with the
    dense values, and an ``MLPRepresentation`` maps the result to ``embed_dim``."""

    def __init__(
        self,
        in_features: int,
        cardinalities: tuple[int, ...],
        hidden: tuple[int, ...],
        embed_dim: int,
        *,
        final_activation: bool,
        skip: bool = False,
        dropout: float = 0.0,
        norm: str = "none",
        dropout_seed: int = 0,
        categorical_dim: int = 0,
    ) -> None:
        super().__init__()
        self.dense_width = in_features - len(cardinalities)
        self.cardinalities = tuple(cardinalities)
        self.embeddings = nn.ModuleList(
            nn.Embedding(n, embedding_dim(n, categorical_dim)) for n in cardinalities
        )
        width = self.dense_width + sum(e.embedding_dim for e in self.embeddings)
        self.mlp = MLPRepresentation(
            width,
            hidden,
            embed_dim,
            final_activation=final_activation,
            skip=skip,
            dropout=dropout,
            norm=norm,
            dropout_seed=dropout_seed,
        )
        self.final_activation = final_activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dense = x[:, : self.dense_width]  # (B, F_dense)
        codes = x[:, self.dense_width :].round().long()  # (B, n_categorical)
        parts = [dense]
        for i, embedding in enumerate(self.embeddings):
            # A code outside the table cannot come from the party's own preprocessing; clamp
            # rather than crash on it (0 is the unknown category).
            column = codes[:, i].clamp(0, self.cardinalities[i] - 1)
            parts.append(embedding(column))  # (B, embedding_dim)
        return self.mlp(torch.cat(parts, dim=1))  # (B, embed_dim)


class WideHead(nn.Module):
    """A head's MLP with a linear map of the same input beside it, summed ("wide and deep",
    Cheng et al. 2016): with the representations' own linear skips, a linear model of the
    features is one path of the network, which tables where a linear model is hard to beat
    (diabetes) need."""

    def __init__(self, mlp: nn.Module, linear: nn.Linear) -> None:
        super().__init__()
        self.mlp = mlp
        self.linear = linear

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.mlp(z) + self.linear(z)  # (B, num_classes)


class CNNRepresentation(nn.Module):
    """Small CPU-friendly CNN for image blocks from 4x4 up to about 32x32.

    conv3x3(C->32) ReLU [maxpool 2x2 if min(H, W) >= 8] conv3x3(32->64) ReLU
    -> AdaptiveAvgPool2d(2x2) -> flatten (256) -> Linear(hidden) ReLU -> Linear(embed_dim)
    [-> ReLU if ``final_activation``].
    """

    def __init__(
        self,
        in_channels: int,
        spatial: tuple[int, int],
        hidden: int,
        embed_dim: int,
        *,
        final_activation: bool,
    ) -> None:
        super().__init__()
        c1, c2 = _CNN_CHANNELS
        downsample: nn.Module = (
            nn.MaxPool2d(2) if min(spatial) >= _CNN_DOWNSAMPLE_MIN_SIDE else nn.Identity()
        )
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, c1, kernel_size=3, padding=1),
            nn.ReLU(),
            downsample,
            nn.Conv2d(c1, c2, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(_CNN_POOL_GRID),
        )
        pooled = c2 * _CNN_POOL_GRID[0] * _CNN_POOL_GRID[1]
        head: list[nn.Module] = [nn.Linear(pooled, hidden), nn.ReLU(), nn.Linear(hidden, embed_dim)]
        if final_activation:
            head.append(nn.ReLU())
        self.project = nn.Sequential(*head)
        self.final_activation = final_activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)  # (B, 64, 2, 2)
        x = x.flatten(1)  # (B, 64*2*2)
        return self.project(x)  # (B, embed_dim)


class BasicBlock(nn.Module):
    """ResNet basic block: two 3x3 conv+BN, identity or 1x1-conv shortcut, ReLU after the sum."""

    def __init__(self, in_planes: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False),
                nn.BatchNorm2d(planes),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))  # (B, planes, H/stride, W/stride)
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


class ResNet18Representation(nn.Module):
    """ResNet-18 (BasicBlock, [2, 2, 2, 2], widths 64/128/256/512) with a CIFAR-style stem.

    Stem: 3x3 conv stride 1 + BN + ReLU, no max-pool. Then global average pool and Linear to
    ``embed_dim`` [-> ReLU if ``final_activation``]. Meant for GPU users; runs on CPU but slowly.
    """

    def __init__(self, in_channels: int, embed_dim: int, *, final_activation: bool) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, _RESNET_WIDTHS[0], 3, stride=1, padding=1, bias=False),
            nn.BatchNorm2d(_RESNET_WIDTHS[0]),
            nn.ReLU(inplace=True),
        )
        stages: list[nn.Module] = []
        in_planes = _RESNET_WIDTHS[0]
        for index, (planes, depth) in enumerate(zip(_RESNET_WIDTHS, _RESNET_DEPTHS, strict=True)):
            first_stride = 1 if index == 0 else 2
            blocks: list[nn.Module] = []
            for block_index in range(depth):
                stride = first_stride if block_index == 0 else 1
                blocks.append(BasicBlock(in_planes, planes, stride))
                in_planes = planes
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_planes, embed_dim)
        self.out_act: nn.Module = nn.ReLU() if final_activation else nn.Identity()
        self.final_activation = final_activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)  # (B, 64, H, W)
        x = self.stages(x)  # (B, 512, H/8, W/8), rounded up
        x = self.pool(x).flatten(1)  # (B, 512)
        return self.out_act(self.fc(x))  # (B, embed_dim)


# --------------------------------------------------------------------------------------------
# Builders
# --------------------------------------------------------------------------------------------


def _check_feature_shape(feature_shape: tuple[int, ...]) -> tuple[int, ...]:
    shape = tuple(feature_shape)
    if len(shape) not in (1, 3):
        raise ConfigError(
            f"feature_shape must be (F,) for tabular or (C, H, W) for image blocks, got {shape}"
        )
    if any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in shape):
        raise ConfigError(f"feature_shape dimensions must be positive integers, got {shape}")
    return shape


def _check_model_config(config: ModelConfig) -> None:
    if config.embed_dim < 1:
        raise ConfigError(f"model.embed_dim must be >= 1, got {config.embed_dim}")
    bad = [h for h in config.hidden if h < 1]
    if bad:
        raise ConfigError(f"model.hidden sizes must all be >= 1, got {config.hidden}")


AUTO_CNN_MIN_PIXELS = 64


def resolve_representation(config: ModelConfig, feature_shape: tuple[int, ...]) -> str:
    """The concrete architecture ("mlp", "cnn" or "resnet18") for this block; resolves "auto"."""
    shape = _check_feature_shape(feature_shape)
    kind = config.representation
    if kind == "auto":
        # Convolutions pay off only on blocks with some spatial extent; on tiny blocks such as
        # digits' 4x4 quadrants an MLP was as accurate and twice as fast (measured).
        return "cnn" if len(shape) == 3 and shape[1] * shape[2] >= AUTO_CNN_MIN_PIXELS else "mlp"
    if kind == "mlp":
        return kind
    if kind in ("cnn", "resnet18"):
        if len(shape) != 3:
            raise ConfigError(
                f"model.representation={kind!r} needs an image block (C, H, W), "
                f"got tabular shape {shape}; use 'mlp' or 'auto'"
            )
        return kind
    raise ConfigError(f"unknown model.representation {kind!r}; expected auto, mlp, cnn or resnet18")


def build_representation(
    config: ModelConfig,
    feature_shape: tuple[int, ...],
    generator_seed: int,
    *,
    final_activation: bool = DEFAULT_FINAL_ACTIVATION,
    categorical: tuple[int, ...] = (),
    numeric: NumericFit | None = None,
) -> nn.Module:
    """Representation model f_k: (B, *feature_shape) float32 -> (B, config.embed_dim).

    "auto" picks "mlp" for (F,) blocks and "cnn" for (C, H, W) blocks. ``categorical`` (tabular
    blocks only) gives the cardinalities of the code columns that end each row: the MLP then
    embeds them first (``TabularRepresentation``). ``numeric``: the party's numeric columns
    fitted on its training rows, for ``config.num_embedding`` (vfl_core.model.tabular_tower).
    Weights depend only on ``generator_seed``; the caller's global RNG state is left untouched.
    """
    _check_model_config(config)
    shape = _check_feature_shape(feature_shape)
    kind = resolve_representation(config, shape)
    _check_categorical(categorical, shape, kind)
    from vfl_core.model import linear_lane, tabular_tower  # they build on this module's classes

    linear_lane.check_lane(config, kind == "mlp" and len(shape) == 1)
    if config.linear_lane:  # the MLP's embed_dim values, then the lane's (linear_lane.LaneTower)
        lane, config = config.linear_lane, config.model_copy(update={"linear_lane": 0})
        tower = build_representation(
            config,
            feature_shape,
            generator_seed,
            final_activation=final_activation,
            categorical=categorical,
            numeric=numeric,
        )
        return linear_lane.lane_tower(tower, shape[0], tuple(categorical), lane, generator_seed)
    if tabular_tower.extended(config):
        if kind != "mlp" or len(shape) != 1:
            raise ConfigError("--num-embedding and --ensemble need tabular parties (mlp)")
        extra = {"numeric": numeric, "final_activation": final_activation}
        return tabular_tower.build_tower(config, shape[0], generator_seed, categorical, **extra)
    skip = config.head == "wide"  # the linear path from the features to the logits starts here
    # MLP towers only; the dropout masks' seed is the weights' (SeededDropout draws apart)
    tower = {"dropout": config.dropout, "norm": config.norm, "dropout_seed": generator_seed}

    def factory() -> nn.Module:
        if categorical:
            return TabularRepresentation(
                shape[0],
                tuple(categorical),
                config.hidden,
                config.embed_dim,
                final_activation=final_activation,
                skip=skip,
                categorical_dim=config.categorical_dim,
                **tower,
            )
        if kind == "mlp":
            return MLPRepresentation(
                math.prod(shape),
                config.hidden,
                config.embed_dim,
                final_activation=final_activation,
                skip=skip,
                **tower,
            )
        channels, height, width = shape
        if kind == "cnn":
            hidden = config.hidden[0] if config.hidden else _CNN_DEFAULT_HIDDEN
            return CNNRepresentation(
                channels,
                (height, width),
                hidden,
                config.embed_dim,
                final_activation=final_activation,
            )
        return ResNet18Representation(channels, config.embed_dim, final_activation=final_activation)

    model = build_seeded(generator_seed, factory)
    logger.debug(
        "built %s representation for shape %s (embed_dim=%d, %d params)",
        kind,
        shape,
        config.embed_dim,
        sum(p.numel() for p in model.parameters()),
    )
    return model


def _check_categorical(categorical: tuple[int, ...], shape: tuple[int, ...], kind: str) -> None:
    if not categorical:
        return
    if kind != "mlp" or len(shape) != 1 or len(categorical) > shape[0]:
        raise ConfigError(
            f"categorical columns {list(categorical)} need a tabular block with at least as "
            f"many features and an mlp representation, got {kind} for shape {shape}"
        )
    if min(categorical) < 1:
        raise ConfigError(f"categorical cardinalities must be >= 1, got {list(categorical)}")


def resolve_head(config: ModelConfig, tabular: bool) -> str:
    """The head ("linear" or "mlp") for a party; resolves "auto": "mlp" for tabular features,
    where the heads' one linear layer on the mean of the parties' embeddings made the model
    additive across parties and an MLP head won on 11 of 18 benchmark runs and lost on 1
    (docs/tabular-defaults.md); "linear" for image blocks, as the LASER-VFL paper has."""
    if config.head == "auto":
        return "mlp" if tabular else "linear"
    if config.head not in ("linear", "mlp", "wide"):
        raise ConfigError(f"unknown model.head {config.head!r}; expected auto, linear, mlp or wide")
    return config.head


def build_head(
    config: ModelConfig,
    num_classes: int,
    generator_seed: int,
    *,
    in_blocks: int = 1,
    tabular: bool = False,
) -> nn.Module:
    """Fusion head g_k: fused embedding (B, in_blocks * embed_dim) -> logits (B, num_classes).

    The input is the mean of embeddings (in_blocks=1) or a concatenation of `in_blocks` of them
    (baselines). "linear" is one Linear; "mlp" is Linear(in, head_hidden), ReLU, Linear(.., C);
    "wide" is the MLP plus a Linear beside it (`WideHead`; the representations then add a linear
    map of their input too, so the logits hold a linear model of every party's features);
    "auto" is `resolve_head`'s choice for a party of tabular features or not.
    """
    if in_blocks < 1:
        raise ConfigError(f"a head needs at least one input block, got {in_blocks}")
    width = in_blocks * config.embed_dim
    _check_model_config(config)
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise ConfigError(f"num_classes must be a positive integer, got {num_classes!r}")
    kind = resolve_head(config, tabular)
    if kind in ("mlp", "wide") and config.head_hidden < 1:
        raise ConfigError(f"model.head_hidden must be >= 1, got {config.head_hidden}")
    if config.ensemble > 1:
        from vfl_core.model.tabular_tower import build_ensemble_head

        return build_ensemble_head(config, kind, num_classes, generator_seed, in_blocks)

    def factory() -> nn.Module:
        if kind == "linear":
            return nn.Linear(width, num_classes)
        mlp = nn.Sequential(
            nn.Linear(width, config.head_hidden),
            nn.ReLU(),
            nn.Linear(config.head_hidden, num_classes),
        )
        return mlp if kind == "mlp" else WideHead(mlp, nn.Linear(width, num_classes, bias=False))

    return build_seeded(generator_seed, factory)
