"""Typed, frozen configuration models. They live at the edges (CLIs, wire, checkpoints)."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from vfl_core.dlvm_config import DlvmConfig
from vfl_core.method_spec import MethodSpec, ProgramHooks
from vfl_core.methods import METHODS as METHODS  # re-exported: the registry's method names
from vfl_core.methods import REGISTRY, method_spec, unknown_method


def _known_method(name: str) -> str:
    if name not in REGISTRY:
        raise PydanticCustomError("unknown_method", "{message}", {"message": unknown_method(name)})
    return name


Representation = Literal["auto", "mlp", "cnn", "resnet18"]
HeadKind = Literal["linear", "mlp"]
# A method is a name in the registry of method specs (vfl_core.methods); others are refused.
Method = Annotated[str, AfterValidator(_known_method)]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ModelConfig(_Frozen):
    """Architecture shared by every party. All parties use the same embedding size."""

    representation: Representation = "auto"
    embed_dim: int = Field(64, ge=1, le=65536)
    hidden: tuple[int, ...] = (256,)
    head: HeadKind = "linear"
    head_hidden: int = Field(64, ge=1)


class TrainConfig(_Frozen):
    """Everything that fixes a training run. One seed fixes plans, task samples and weights."""

    method: Method = "laser"
    seed: int = 0
    epochs: int = Field(60, ge=0)
    batch_size: int = Field(64, ge=1)
    eval_batch_size: int = Field(512, ge=1)
    lr: float = Field(1e-3, gt=0)
    weight_decay: float = Field(1e-4, ge=0)
    optimizer: Literal["adam", "sgd"] = "adam"
    momentum: float = Field(0.9, ge=0, lt=1)
    scheduler: Literal["none", "cosine"] = "none"
    # "resample": class-balanced resampling of each epoch's plan (the paper's Credit setup).
    # The label party then tells the coordinator each training sample's class weight.
    balance: Literal["none", "resample"] = "none"
    # LASER-VFL heads also serve the sets of feature-only parties (vfl_core.laser): they train on
    # their subsets and predict for samples no label party observes. False: the paper's
    # objective exactly. No effect when every party holds labels, or for the baselines.
    serve_feature_only: bool = True
    model: ModelConfig = ModelConfig()
    dlvm: DlvmConfig = DlvmConfig()  # used by method "dlvm" only

    @model_validator(mode="after")
    def _constant_lr_for_programs(self) -> TrainConfig:
        # Round programs (dvfl) step their own optimisers at the configured rate.
        if self.spec.program is not None and self.scheduler != "none":
            raise ValueError(f"method {self.method} trains with constant learning rates")
        return self

    @property
    def total_epochs(self) -> int:
        """Epochs of the whole run: a method's round program may add stages (dvfl's owner)."""
        program = self.spec.program
        return program.epochs(self) if isinstance(program, ProgramHooks) else self.epochs

    @property
    def spec(self) -> MethodSpec:
        """The method's spec as this config runs it (what Party and the engine ask)."""
        spec = method_spec(self.method)
        if spec.serves_feature_only and not self.serve_feature_only:
            return replace(spec, serves_feature_only=False)
        return spec
