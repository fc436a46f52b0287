"""Shapes, deterministic initialisation and config errors of vfl_core.model.models."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from vfl_core.config import ModelConfig
from vfl_core.errors import ConfigError
from vfl_core.model.models import (
    CNNRepresentation,
    MLPRepresentation,
    ResNet18Representation,
    WideHead,
    build_head,
    build_representation,
    resolve_representation,
)


def _params(model: nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def _same(a: nn.Module, b: nn.Module) -> bool:
    pa, pb = _params(a), _params(b)
    return len(pa) == len(pb) and all(torch.equal(x, y) for x, y in zip(pa, pb, strict=True))


# ---------------------------------------------------------------- MLP


@pytest.mark.parametrize("shape", [(5,), (1, 4, 4)])
def test_mlp_output_shape(shape: tuple[int, ...]) -> None:
    config = ModelConfig(representation="mlp", embed_dim=10, hidden=(10, 10))
    model = build_representation(config, shape, generator_seed=0)
    assert isinstance(model, MLPRepresentation)
    out = model(torch.randn(7, *shape))
    assert out.shape == (7, 10)
    assert out.dtype == torch.float32


def test_auto_is_mlp_for_tabular_and_tiny_images_and_cnn_for_larger_images() -> None:
    config = ModelConfig(representation="auto")
    assert resolve_representation(config, (5,)) == "mlp"
    assert resolve_representation(config, (1, 4, 4)) == "mlp"
    assert resolve_representation(config, (1, 14, 14)) == "cnn"
    assert resolve_representation(config, (1, 28, 7)) == "cnn"
    assert isinstance(build_representation(config, (5,), 0), MLPRepresentation)
    assert isinstance(build_representation(config, (1, 14, 14), 0), CNNRepresentation)


def test_credit_mlp_layout_matches_reference() -> None:
    config = ModelConfig(representation="mlp", embed_dim=10, hidden=(10, 10))
    model = build_representation(config, (5,), 0)
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(5, 10), (10, 10), (10, 10)]
    # Default: no ReLU after the last Linear, as in the reference code.
    assert isinstance(list(model.modules())[-1], nn.Linear)


def test_mlp_empty_hidden_is_single_linear() -> None:
    config = ModelConfig(representation="mlp", embed_dim=3, hidden=())
    model = build_representation(config, (4,), 0)
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert len(linears) == 1
    assert model(torch.randn(2, 4)).shape == (2, 3)


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_final_activation_makes_embeddings_non_negative(kind: str) -> None:
    config = ModelConfig(representation=kind, embed_dim=8, hidden=(16,))
    shape = (6,) if kind == "mlp" else (1, 4, 4)
    x = torch.randn(32, *shape)
    with_relu = build_representation(config, shape, 3, final_activation=True)
    without = build_representation(config, shape, 3, final_activation=False)
    assert (with_relu(x) >= 0).all()
    assert (without(x) < 0).any()


# ---------------------------------------------------------------- CNN


@pytest.mark.parametrize("shape", [(1, 4, 4), (1, 14, 14), (1, 28, 7), (1, 28, 28), (3, 16, 16)])
def test_cnn_output_shape(shape: tuple[int, ...]) -> None:
    config = ModelConfig(representation="cnn", embed_dim=12, hidden=(32,))
    model = build_representation(config, shape, generator_seed=1)
    assert isinstance(model, CNNRepresentation)
    assert model(torch.randn(3, *shape)).shape == (3, 12)


def test_cnn_empty_hidden_uses_128() -> None:
    config = ModelConfig(representation="cnn", embed_dim=4, hidden=())
    model = build_representation(config, (1, 4, 4), 0)
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert linears[0].out_features == 128
    assert model(torch.randn(2, 1, 4, 4)).shape == (2, 4)


# ---------------------------------------------------------------- ResNet-18


def test_resnet18_cpu_smoke_forward_backward_step() -> None:
    config = ModelConfig(representation="resnet18", embed_dim=16)
    model = build_representation(config, (3, 16, 16), generator_seed=0)
    assert isinstance(model, ResNet18Representation)
    n_params = sum(p.numel() for p in model.parameters())
    assert 11_000_000 < n_params < 11_400_000  # ResNet-18 body (~11.17M) + small fc
    head = build_head(config, num_classes=10, generator_seed=0)
    x = torch.randn(2, 3, 16, 16)
    y = torch.tensor([1, 7])

    before = _params(model)
    optimizer = torch.optim.SGD([*model.parameters(), *head.parameters()], lr=0.1)
    embedding = model(x)
    assert embedding.shape == (2, 16)
    loss = nn.functional.cross_entropy(head(embedding), y)
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())
    optimizer.step()
    after = _params(model)
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))


# ---------------------------------------------------------------- heads


def test_linear_head() -> None:
    config = ModelConfig(embed_dim=10, head="linear")
    head = build_head(config, num_classes=2, generator_seed=0)
    assert len([m for m in head.modules() if isinstance(m, nn.Linear)]) == 1
    assert head(torch.randn(5, 10)).shape == (5, 2)


def test_mlp_head() -> None:
    config = ModelConfig(embed_dim=10, head="mlp", head_hidden=7)
    head = build_head(config, num_classes=3, generator_seed=0)
    linears = [m for m in head.modules() if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(10, 7), (7, 3)]
    assert head(torch.randn(5, 10)).shape == (5, 3)


# ---------------------------------------------------------------- determinism


@pytest.mark.parametrize(
    ("representation", "shape"),
    [("mlp", (5,)), ("cnn", (1, 4, 4)), ("resnet18", (3, 4, 4))],
)
def test_same_seed_identical_different_seed_differs(
    representation: str, shape: tuple[int, ...]
) -> None:
    config = ModelConfig(representation=representation, embed_dim=8, hidden=(16,))
    a = build_representation(config, shape, 42)
    b = build_representation(config, shape, 42)
    c = build_representation(config, shape, 43)
    assert _same(a, b)
    assert not _same(a, c)


def test_wide_head_adds_a_linear_path_beside_each_mlp() -> None:
    wide = ModelConfig(representation="mlp", embed_dim=6, hidden=(16,), head="wide")
    representation = build_representation(wide, (5,), 0)
    head = build_head(wide, num_classes=2, generator_seed=0, tabular=True)
    assert isinstance(head, WideHead)
    assert representation(torch.randn(3, 5)).shape == (3, 6)
    assert head(torch.randn(3, 6)).shape == (3, 2)
    # with its MLPs' last layers at zero, the network is one linear map of the features
    representation.net[-1].weight.data.zero_()
    representation.net[-1].bias.data.zero_()
    head.mlp[-1].weight.data.zero_()
    head.mlp[-1].bias.data.zero_()
    x, y = torch.randn(4, 5), torch.randn(4, 5)
    logits = head(representation(x + y))
    assert torch.allclose(logits, head(representation(x)) + head(representation(y)), atol=1e-5)


def test_wide_head_leaves_the_mlp_weights_of_a_seed_unchanged() -> None:
    mlp = build_representation(ModelConfig(representation="mlp", head="mlp"), (5,), 3)
    wide = build_representation(ModelConfig(representation="mlp", head="wide"), (5,), 3)
    assert _same(mlp.net, wide.net)


@pytest.mark.parametrize("norm", ["layer", "batch"])
def test_tower_norm_and_dropout_sit_after_each_hidden_linear_and_keep_its_weights(
    norm: str,
) -> None:
    plain = build_representation(ModelConfig(representation="mlp", hidden=(8, 8)), (5,), 3)
    tower = ModelConfig(representation="mlp", hidden=(8, 8), norm=norm, dropout=0.2)
    built = build_representation(tower, (5,), 3)
    kinds = [type(m).__name__ for m in built.net]
    normal = "LayerNorm" if norm == "layer" else "RowSafeBatchNorm"
    assert kinds == ["Linear", normal, "ReLU", "SeededDropout"] * 2 + ["Linear"]
    linears = [m for m in built.net if isinstance(m, nn.Linear)]
    assert all(_same(a, b) for a, b in zip(plain.net[::2], linears, strict=True))
    built.eval()  # dropout off, batch norm on its running statistics: deterministic
    x = torch.randn(4, 5)
    assert torch.equal(built(x), built(x))


def test_batch_norm_trains_on_a_batch_of_one_row_by_its_running_statistics() -> None:
    tower = ModelConfig(representation="mlp", hidden=(8,), norm="batch")
    built = build_representation(tower, (5,), 0).train()
    x = torch.randn(1, 5)
    one = built(x)  # a party may hold one row of a round's batch: no error
    assert one.shape == (1, 64)
    assert torch.equal(one, built.eval()(x))  # the running statistics, as at inference


def test_categorical_dim_fixes_every_embedding_width() -> None:
    rule = build_representation(ModelConfig(representation="mlp"), (4,), 0, categorical=(7, 500))
    fixed = ModelConfig(representation="mlp", categorical_dim=3)
    built = build_representation(fixed, (4,), 0, categorical=(7, 500))
    assert [e.embedding_dim for e in rule.embeddings] == [5, 16]
    assert [e.embedding_dim for e in built.embeddings] == [3, 3]
    assert built(torch.tensor([[0.5, 1.0, 6.0, 499.0]])).shape == (1, 64)


def test_unknown_norm_is_refused() -> None:
    with pytest.raises(ValueError, match="norm"):
        ModelConfig(norm="group")  # type: ignore[arg-type]


@pytest.mark.parametrize("head_kind", ["linear", "mlp"])
def test_head_seed_determinism(head_kind: str) -> None:
    config = ModelConfig(embed_dim=8, head=head_kind)
    assert _same(build_head(config, 4, 5), build_head(config, 4, 5))
    assert not _same(build_head(config, 4, 5), build_head(config, 4, 6))


def test_building_does_not_touch_global_rng() -> None:
    torch.manual_seed(1234)
    state = torch.get_rng_state()
    config = ModelConfig(representation="auto", embed_dim=8, hidden=(16,), head="mlp")
    build_representation(config, (5,), 7)
    build_representation(config, (1, 4, 4), 7)
    build_representation(config.model_copy(update={"representation": "resnet18"}), (3, 4, 4), 7)
    build_head(config, 3, 7)
    assert torch.equal(torch.get_rng_state(), state)
    expected = torch.Generator().manual_seed(1234)
    assert torch.equal(torch.rand(4), torch.rand(4, generator=expected))


def test_seed_independent_of_global_rng() -> None:
    config = ModelConfig(representation="mlp", embed_dim=4)
    torch.manual_seed(0)
    a = build_representation(config, (3,), 9)
    torch.manual_seed(999)
    b = build_representation(config, (3,), 9)
    assert _same(a, b)


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("representation", "shape", "match"),
    [
        ("cnn", (5,), "needs an image block"),
        ("resnet18", (5,), "needs an image block"),
        ("mlp", (3, 4), r"feature_shape must be \(F,\)"),
        ("resnet18", (1, 2, 3, 4), r"feature_shape must be \(F,\)"),
        ("auto", (), r"feature_shape must be \(F,\)"),
        ("mlp", (0,), "positive integers"),
        ("cnn", (1, 0, 4), "positive integers"),
    ],
)
def test_representation_config_errors(
    representation: str, shape: tuple[int, ...], match: str
) -> None:
    config = ModelConfig(representation=representation)
    with pytest.raises(ConfigError, match=match) as info:
        build_representation(config, shape, 0)
    assert "\n" not in str(info.value)


def test_embed_dim_below_one_is_config_error() -> None:
    # Pydantic already rejects this; model_construct bypasses validation like a bad checkpoint.
    config = ModelConfig.model_construct(
        representation="mlp", embed_dim=0, hidden=(4,), head="linear", head_hidden=4
    )
    with pytest.raises(ConfigError, match="embed_dim"):
        build_representation(config, (5,), 0)
    with pytest.raises(ConfigError, match="embed_dim"):
        build_head(config, 2, 0)


def test_other_config_errors() -> None:
    bad_hidden = ModelConfig.model_construct(
        representation="mlp", embed_dim=4, hidden=(4, 0), head="linear", head_hidden=4
    )
    with pytest.raises(ConfigError, match="hidden"):
        build_representation(bad_hidden, (5,), 0)
    unknown = ModelConfig.model_construct(
        representation="transformer", embed_dim=4, hidden=(4,), head="linear", head_hidden=4
    )
    with pytest.raises(ConfigError, match=r"unknown model\.representation"):
        build_representation(unknown, (5,), 0)
    with pytest.raises(ConfigError, match="num_classes"):
        build_head(ModelConfig(), 0, 0)
    with pytest.raises(ConfigError, match="seed"):
        build_representation(ModelConfig(), (5,), -1)
