"""A party's serving bundle: what it needs to answer online requests, and nothing of any other
party's.

A bundle is a directory written after training (`vfl-client --bundle-dir`, `vfl export`):

    bundle.json        BundleMeta: block, task, classes, threshold, target scale, columns
    representation.pt  f_k as TorchScript (traced in eval mode, on CPU)
    head.pt            g_k as TorchScript, at a party with a head
    concat_head.pt     its concatenating head, where the validation chose it for some set
    preprocess.json    the party's fitted table preprocessing, for a tabular party

TorchScript and not eager modules or ONNX: a traced module loads without the model classes or
the training config, and its one-row latency was the lowest measured here (docs/serving.md has
the table and the command; onnxruntime is not a dependency).

Only methods that fuse by a mean of embeddings into one shared head (LASER-VFL, its local-head
and dropout variants) are served: a head's input is then the mean of whichever blocks answered,
so every subset of parties is predicted exactly as in training (the paper's h_{k,I}).
"""

from __future__ import annotations

import copy
import json
import logging
import warnings
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from vfl_core.atomic_files import write_text_atomically
from vfl_core.data.learning_task import REGRESSION
from vfl_core.data.preprocess import TabularPreprocessor
from vfl_core.errors import ConfigError, DataError
from vfl_core.methods.laser.objective import fuse_mean
from vfl_core.methods.spec import BLEND, CONCAT, EXTRA_HEADS, LINEAR
from vfl_core.model.model_config import wire_width
from vfl_core.model.slots import SHARED
from vfl_core.protocol import ServingChoice
from vfl_core.training.party import Party

log = logging.getLogger(__name__)

# 2: the validation choice of subsets (BundleMeta.subsets); 3: of the concatenating head
# (BundleMeta.concat_sets); 4: of the linear head (BundleMeta.linear_sets); 5: of the heads'
# mean (BundleMeta.blend_sets); older ones still load
BUNDLE_FORMAT = 5
READABLE_FORMATS = (1, 2, 3, 4, 5)
META_FILE = "bundle.json"
REPRESENTATION_FILE = "representation.pt"
HEAD_FILE = "head.pt"
CONCAT_HEAD_FILE = "concat_head.pt"
LINEAR_HEAD_FILE = "linear_head.pt"
# the file of each head beside the party's own (vfl_core.methods.spec.EXTRA_HEADS)
HEAD_FILES = {CONCAT: CONCAT_HEAD_FILE, LINEAR: LINEAR_HEAD_FILE}
PREPROCESS_FILE = "preprocess.json"


class SubsetRule(BaseModel):
    """An observed set of blocks and the blocks it is predicted from (the validation choice)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    observed: tuple[int, ...]
    kept: tuple[int, ...]


class BundleMeta(BaseModel):
    """What the serving path needs besides the weights (bundle.json)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format: int = BUNDLE_FORMAT
    party_id: str
    block: int = Field(ge=0)
    num_blocks: int = Field(ge=1)
    method: str
    task: Literal["classification", "regression"]
    feature_shape: tuple[int, ...]
    embed_dim: int = Field(ge=1)
    num_classes: int = Field(ge=1)
    classes: tuple[str, ...] = ()  # class index -> label as written in the training table
    has_head: bool
    own_block_only: bool = False  # the head reads the party's own block only (local baseline)
    # the head also predicts a sample the party does not hold, from the feature parties' blocks
    serves_feature_only: bool = False
    # binary classification: probability of class 1 at or above which class 1 is predicted
    # (the validation choice, vfl_core.inference.choice); None: argmax
    threshold: float | None = Field(None, ge=0.0, le=1.0)
    # the validation choice of parties per observed set (vfl_core.inference.choice); a set not
    # named is predicted from all of its parties
    subsets: tuple[SubsetRule, ...] = ()
    # the observed sets the validation chose the concatenating head for (TrainConfig.concat_head):
    # predicted by CONCAT_HEAD_FILE from the zero-filled concatenation of all num_blocks blocks
    concat_sets: tuple[tuple[int, ...], ...] = ()
    # ... and the linear head (ModelConfig.linear_lane), by LINEAR_HEAD_FILE from the same input
    linear_sets: tuple[tuple[int, ...], ...] = ()
    # ... and the mean of the predictions of `blend_heads` ("": HEAD_FILE's, on the mean of the
    # embeddings; the others as above), each set predicted from all of its blocks
    blend_sets: tuple[tuple[int, ...], ...] = ()
    blend_heads: tuple[str, ...] = ()
    target_mean: float = 0.0  # regression: the head's standardised output in original units
    target_std: float = 1.0
    target_log: bool = (
        False  # regression: the head learnt log(1 + y) (TrainConfig.target_transform)
    )
    columns: tuple[str, ...] = ()  # a tabular party's feature columns, in its table

    def head_sets(self, name: str) -> tuple[tuple[int, ...], ...]:
        """The observed sets the choice predicts with head `name` (EXTRA_HEADS' or BLEND)."""
        return getattr(self, f"{name}_sets")


def write_bundle(
    party: Party,
    directory: Path,
    threshold: float | None = None,
    choice: ServingChoice | None = None,
) -> Path:
    """Write `party`'s serving bundle to `directory` (created; files replaced atomically).
    A label party's bundle holds how the federation decides: `choice` (the threshold and
    subsets the validation split chose), `threshold` overriding the choice's."""
    _check_servable(party)
    directory.mkdir(parents=True, exist_ok=True)
    example = torch.zeros((1, *party.data.meta.feature_shape))  # (1, *feature_shape)
    models = party.models  # the averaged weights, with TrainConfig.weight_average
    _save_traced(models.evaluated_rep(SHARED), example, directory / REPRESENTATION_FILE)
    labelled = party.data.meta.has_labels and party.g is not None
    head = models.evaluated_head(SHARED) if labelled else None
    if head is not None:
        _save_traced(head, torch.zeros((1, wire_width(party.config.model))), directory / HEAD_FILE)
    sets = _head_sets(party, choice) if head is not None else {}
    blend = party.spec.blend_members if sets.get(BLEND) else ()
    width = party.data.meta.num_blocks * wire_width(party.config.model)
    for name, (key, _) in EXTRA_HEADS.items():
        if sets.get(name) or name in blend:
            file = directory / HEAD_FILES[name]
            _save_traced(models.evaluated_head(key), torch.zeros((1, width)), file)
    pre = party.data.preprocessing
    if pre is not None:
        write_text_atomically(directory / PREPROCESS_FILE, json.dumps(pre, indent=2) + "\n")
    if head is not None and choice is not None:
        threshold = choice.threshold if threshold is None else threshold
    rules = choice.subsets if head is not None and choice is not None else {}
    meta = bundle_meta(party, threshold, has_head=head is not None, subsets=rules)
    update = {f"{name}_sets": sets.get(name, ()) for name in (*EXTRA_HEADS, BLEND)}
    update["blend_heads"] = blend
    meta = meta.model_copy(update=update)
    write_text_atomically(directory / META_FILE, meta.model_dump_json(indent=2) + "\n")
    log.info("party %s wrote its serving bundle to %s", party.party_id, directory)
    return directory


def bundle_meta(
    party: Party,
    threshold: float | None,
    *,
    has_head: bool,
    subsets: Mapping[tuple[int, ...], tuple[int, ...]] | None = None,
) -> BundleMeta:
    meta = party.data.meta
    pre = party.data.preprocessing or {}
    return BundleMeta(
        party_id=party.party_id,
        block=meta.block,
        num_blocks=meta.num_blocks,
        method=party.config.method,
        task=meta.task,
        feature_shape=tuple(meta.feature_shape),
        embed_dim=wire_width(party.config.model),  # what a sample's embedding holds
        num_classes=meta.num_classes,
        classes=tuple(pre.get("classes", ())),
        has_head=has_head,
        own_block_only=party.spec.own_block_only,
        serves_feature_only=party.spec.serves_feature_only,
        threshold=threshold,
        subsets=tuple(
            SubsetRule(observed=o, kept=k) for o, k in sorted((subsets or {}).items()) if o != k
        ),
        target_mean=party.scaler.mean,
        target_std=party.scaler.std,
        target_log=party.scaler.log,
        columns=tuple(c["name"] for c in pre.get("columns", ())),
    )


def _head_sets(
    party: Party, choice: ServingChoice | None
) -> dict[str, tuple[tuple[int, ...], ...]]:
    """The observed sets `choice` predicts with the concatenating, the linear head or their
    blend, by head (which the party must have trained)."""
    heads = choice.heads if choice else {}
    names = (*EXTRA_HEADS, BLEND)
    sets = {n: tuple(sorted(o for o, h in heads.items() if h == n)) for n in names}
    trained = {*party.spec.extra_head_names, *([BLEND] if party.spec.blend_members else [])}
    for name in names:
        if sets[name] and name not in trained:
            flag = EXTRA_HEADS[name][1] if name in EXTRA_HEADS else "a head beside its own"
            raise ConfigError(
                f"the choice predicts {len(sets[name])} observed sets with the {name} head, but "
                f"party {party.party_id} trained none ({flag})"
            )
    return sets


def _check_servable(party: Party) -> None:
    spec = party.spec
    if party.roles is not None or spec.concatenates or spec.heads == "subset_owner":
        raise ConfigError(
            f"method {party.config.method!r} cannot be served from bundles: online serving "
            "needs one representation per party fused by a mean into one head (LASER-VFL and "
            "its mean-fusion variants)"
        )


def _save_traced(module: torch.nn.Module, example: torch.Tensor, path: Path) -> None:
    """`module` traced on CPU in eval mode (a copy: the party's own keeps its mode and device)."""
    model = copy.deepcopy(module).to("cpu").eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        traced = torch.jit.trace(model, example, check_trace=False)
    tmp = path.with_name(path.name + ".tmp")
    torch.jit.save(traced, str(tmp))
    tmp.replace(path)


@dataclass
class Bundle:
    """A loaded bundle: embeds the party's feature rows and, with a head, predicts from the
    embeddings of whichever blocks answered."""

    meta: BundleMeta
    representation: torch.jit.ScriptModule
    head: torch.jit.ScriptModule | None
    preprocessing: TabularPreprocessor | None
    device: torch.device
    # the heads beside the party's own that it loaded, by name (BundleMeta.concat_sets' ...)
    extra_heads: dict[str, torch.jit.ScriptModule] = field(default_factory=dict)

    def embed(self, features: np.ndarray) -> np.ndarray:
        """(B, *feature_shape) float32 rows -> (B, embed_dim) float32 embeddings."""
        shape = tuple(self.meta.feature_shape)
        if features.dtype != np.float32 or tuple(features.shape[1:]) != shape:
            got = f"{features.dtype} {tuple(features.shape)}"
            raise DataError(f"features: got {got}, expected float32 (B, {shape})")
        with torch.no_grad():
            x = torch.from_numpy(features).to(self.device)
            return self.representation(x).to("cpu", torch.float32).numpy()  # (B, d)

    def predict(self, embeddings: Mapping[int, np.ndarray], head: str = "") -> np.ndarray:
        """The head on the mean of `embeddings` (block -> (B, d)): (B, C) class probabilities,
        or (B, 1) values in original units. Without the party's own block only where the
        method's heads serve feature-only sets (LASER-VFL's do). `head` "concat" or "linear"
        (as `head_for` names it): that head on the zero-filled concatenation; "blend": the mean
        of `blend_heads`' predictions."""
        if self.head is None:
            raise ConfigError(f"party {self.meta.party_id} has no head: it cannot predict")
        if not embeddings or not self.can_predict(embeddings):
            raise DataError(f"predict: the embedding of the party's own block {self.meta.block}")
        blocks = (self.meta.block,) if self.meta.own_block_only else tuple(sorted(embeddings))
        tensors = {b: torch.from_numpy(embeddings[b]).to(self.device) for b in blocks}
        names = self.meta.blend_heads if head == BLEND else (head,)
        if not names:
            raise DataError(f"predict: party {self.meta.party_id} has no {BLEND!r} head")
        with torch.no_grad():
            outputs = [self._output(tensors, blocks, name) for name in names]
            output = outputs[0] if len(outputs) == 1 else torch.stack(outputs).mean(dim=0)
        return output.to("cpu", torch.float32).numpy()

    def _output(
        self, tensors: Mapping[int, torch.Tensor], blocks: tuple[int, ...], head: str
    ) -> torch.Tensor:
        """One head's (B, C) probabilities or (B, 1) values in original units."""
        if head:
            output = self._concatenated(tensors, head)
        else:
            output = self.head(fuse_mean(tensors, blocks))  # type: ignore[misc]
        if self.meta.task == REGRESSION:
            output = output * self.meta.target_std + self.meta.target_mean
            return torch.expm1(output) if self.meta.target_log else output
        return torch.softmax(output, dim=1)

    def head_for(self, present: tuple[int, ...]) -> str:
        """The head that predicts an observed set: "concat", "linear" or "blend" where the
        validation chose the concatenating head, the linear head or their blend, else "" (the
        mean-fusion head)."""
        for name in (BLEND, *EXTRA_HEADS):
            if present in self.meta.head_sets(name):
                return name
        return ""

    def _concatenated(self, tensors: Mapping[int, torch.Tensor], head: str) -> torch.Tensor:
        module = self.extra_heads.get(head)
        if module is None:
            raise DataError(f"predict: party {self.meta.party_id} has no {head[:64]!r} head")
        first = next(iter(tensors.values()))
        zeros = torch.zeros_like(first)  # (B, d): an absent block
        parts = [tensors.get(b, zeros) for b in range(self.meta.num_blocks)]
        return module(torch.cat(parts, dim=1))  # (B, num_blocks * d) -> (B, C)

    def can_predict(self, blocks: Collection[int]) -> bool:
        """Whether the head predicts from these blocks' embeddings."""
        if self.meta.block in blocks:
            return True
        return self.meta.serves_feature_only and not self.meta.own_block_only and bool(blocks)

    def kept(self, present: tuple[int, ...]) -> tuple[int, ...]:
        """The blocks of an observed set that predict it: the validation choice's, else all."""
        for rule in self.meta.subsets:
            if rule.observed == present:
                return rule.kept
        return present

    def decide(self, probs: np.ndarray) -> np.ndarray:
        """(B, C) probabilities -> (B,) classes, with the bundle's threshold when binary."""
        if self.meta.threshold is not None and probs.shape[1] == 2:
            return (probs[:, 1] >= self.meta.threshold).astype(np.int64)
        return probs.argmax(axis=1)

    def label(self, index: int) -> str:
        """A class index as the training table wrote it (the index itself without classes)."""
        classes = self.meta.classes
        return classes[index] if 0 <= index < len(classes) else str(index)


def load_bundle(directory: Path, device: torch.device | str = "cpu") -> Bundle:
    """Read a bundle written by `write_bundle`; a missing or malformed file is a DataError."""
    meta = _read_meta(directory / META_FILE)
    device = torch.device(device)
    representation = _load_module(directory / REPRESENTATION_FILE, device)
    head = _load_module(directory / HEAD_FILE, device) if meta.has_head else None
    pre_file = directory / PREPROCESS_FILE
    preprocessing = None
    if pre_file.is_file():
        preprocessing = TabularPreprocessor.from_json(pre_file.read_text(), str(pre_file))
    extra = {
        name: _load_module(directory / file, device)
        for name, file in HEAD_FILES.items()
        if meta.has_head
        and (meta.head_sets(name) or (meta.blend_sets and name in meta.blend_heads))
    }
    return Bundle(meta, representation, head, preprocessing, device, extra)


def read_bundle_meta(directory: Path) -> BundleMeta:
    """A bundle's metadata alone (no model loaded): a DataError as load_bundle's."""
    return _read_meta(directory / META_FILE)


def _read_meta(path: Path) -> BundleMeta:
    try:
        meta = BundleMeta.model_validate_json(path.read_text())
    except OSError as err:
        raise DataError(f"{path}: not a serving bundle ({err.strerror})") from None
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise DataError(f"{path}: invalid bundle metadata ({where}: {first['msg']})") from None
    if meta.format not in READABLE_FORMATS:
        readable = " and ".join(map(str, READABLE_FORMATS))
        raise DataError(f"{path}: bundle format {meta.format}, this version reads {readable}")
    return meta


def _load_module(path: Path, device: torch.device) -> torch.jit.ScriptModule:
    if not path.is_file():
        raise DataError(f"{path}: missing from the serving bundle")
    try:
        module = torch.jit.load(str(path), map_location=device)
    except RuntimeError as err:
        raise DataError(f"{path}: not a TorchScript module ({str(err).splitlines()[0]})") from None
    return module.eval()
