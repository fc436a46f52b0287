"""One party of the federation: its data block, its models, optimisers and RNG.

A Party answers the calls of `vfl_core.protocol` and knows nothing of how they arrive. It keeps
what every method shares (data and splits, row digests, alignment keys, the model bank with its
optimisers, checkpoint state, random streams) behind the public interface the methods use
(`vfl_core.methods.party_port.PartyPort`); what a party does in each step is the method's:
LASER-VFL's and its baselines' in `vfl_core.methods.laser.party_steps`, a method with a round
program's in its own party state (`ProgramHooks.party_state`, e.g. vfl_core.methods.dvfl.roles).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from vfl_core.auto_rounds import resolve
from vfl_core.config import TrainConfig
from vfl_core.data.learning_task import REGRESSION, TargetScaler, head_loss, output_width
from vfl_core.data.missingness import UNLABELLED
from vfl_core.data.party_dir import PartyData, PartySplit, labelled_rows_only
from vfl_core.errors import ConfigError, ProtocolError
from vfl_core.inference.blind import unblinded
from vfl_core.inference.scoring import coarsened, score_batch, summed
from vfl_core.methods.laser.party_steps import LaserSteps
from vfl_core.methods.spec import SHARED, ProgramHooks
from vfl_core.model.ensemble import member_loss
from vfl_core.model.model_bank import ModelBank
from vfl_core.model.model_config import ModelConfig, wire_width
from vfl_core.model.num_embeddings import NumericFit, fit_numeric
from vfl_core.privacy.guards import PartyGuard
from vfl_core.privacy.pretrain import Pretrain, pretrain_tower
from vfl_core.privacy.private_tower import fixed_tower
from vfl_core.protocol import (
    BackwardCall,
    EmbedCall,
    FuseCall,
    FuseResult,
    PartyInfo,
    PredictCall,
    ScoreCall,
    ScoreResult,
    TrainCall,
    TrainResult,
)
from vfl_core.seeding import Stream, rng
from vfl_core.training import strata
from vfl_core.training.alignment import batch_digest, hash_ids
from vfl_core.training.psi import PartyPsi, check_keys

if TYPE_CHECKING:  # a method's party state is built by its spec (ProgramHooks.party_state)
    from vfl_core.methods.dlvm.roles import DlvmRoles
    from vfl_core.methods.dvfl.roles import DvflRoles

log = logging.getLogger(__name__)


class Party:
    def __init__(
        self,
        party_id: str,
        data: PartyData,
        config: TrainConfig,
        *,
        secret: bytes,
        device: torch.device | str = "cpu",
        tower_seed: int | None = None,
    ) -> None:
        self.party_id = party_id
        self.tower_seed = tower_seed  # the party's own (vfl_core.privacy.private_tower)
        # feature vectors take the tabular defaults (TrainConfig.spec_for; their rounds:
        # vfl_core.auto_rounds); `told`: the config as told, which vfl_client.host compares
        tabular, self.told = len(data.meta.feature_shape) == 1, config
        self.config = resolve(config, tabular, quiet=True)
        self.spec = self.config.spec_for(tabular)  # with its linear lanes, as resolved
        # Most methods learn only from labels: unlabelled training rows (vfl prepare --labels)
        # take no part, as if the label party did not hold them; dvfl's guests learn from them.
        self.data = data if self.spec.unlabelled_rows else labelled_rows_only(data)
        # label-leak defences (off by default); label DP swaps its training labels here, once
        self.guard = PartyGuard(config.privacy, config.seed, data.meta.block)
        self.data = _randomised_labels(self.data, self.guard)
        self.device = torch.device(device)
        self.block = data.meta.block
        self._secret = secret
        self._hashes: dict[str, list[bytes]] = {}
        self._psi_keys: dict[str, list[bytes]] = {}  # split -> final PSI values of its rows
        self.psi = PartyPsi(max_lists=max(1, data.meta.num_blocks - 1))
        self._features: dict[str, torch.Tensor] = {}
        self.last_round = -1
        self._kept: tuple[int, dict] | None = None  # (round, state) for early stopping
        self._held: tuple[int, dict] | None = None  # (round, state): --overlap-validation
        self.held_heads: tuple[int, dict] | None = None  # --epoch-flow (training.held_heads)
        meta, self.task = data.meta, data.meta.task
        # an ensemble's heads return each member's output in training (model.ensemble)
        self.loss_fn = member_loss(head_loss(meta.task, config.label_smoothing))
        # regression targets standardised by this party's own labels (the statistics stay here)
        train = data.splits.get("train")
        labels = train.labels if train is not None and self.task == REGRESSION else None
        self.scaler = TargetScaler.fit(labels, config.target_transform)
        self.models = ModelBank(
            self.config,
            meta.block,
            meta.num_blocks,
            tuple(meta.feature_shape),
            output_width(meta.task, meta.num_classes),
            self.device,
            categorical=tuple(meta.categorical),
            train_rows=_train_rows(self.data),
            numeric=_numeric_fit(self.data, config.model),
        )
        # A method with a round program may keep models of its own here (dvfl: its guest, host
        # replica and owner, vfl_core.methods.dvfl.roles) instead of f_k and g_k: an object
        # with embed(EmbedCall), modules(), state_dict() and load_state_dict(state, last_round).
        hooks = self.spec.program if isinstance(self.spec.program, ProgramHooks) else None
        self.roles = None if hooks is None else hooks.party_state(self)
        self._fixed_tower()
        self.laser = LaserSteps(self, build_models=self.roles is None)
        self._pretrain()

    def _fixed_tower(self) -> None:
        """A feature-only party's fixed orthogonal tower (PrivacyConfig.feature_tower)."""
        meta, kind = self.data.meta, self.config.privacy.feature_tower
        if meta.has_labels or kind == "model":
            return
        if self.roles is not None:
            raise ConfigError(f"feature_tower: method {self.config.method} has no tower f_k")
        shape, dim = tuple(meta.feature_shape), wire_width(self.config.model)
        train = self.data.splits.get("train")
        rows = None if train is None else train.features  # its own columns' statistics
        seed = self.tower_seed
        tower = fixed_tower(kind, shape, dim, self.config.seed, self.block, seed, rows)
        if tower is not None:
            self.models.install_rep(SHARED, tower)

    def _pretrain(self) -> None:
        """A feature-only party under `withhold` with feature_pretrain: its tower trained on
        its own training rows without labels, once, before any round (vfl_core.privacy.pretrain)."""
        privacy = self.config.privacy
        train = self.data.splits.get("train")
        if privacy.feature_pretrain == "none" or self.data.meta.has_labels or train is None:
            return
        if self.roles is not None:
            raise ConfigError(f"feature_pretrain: method {self.config.method} has no tower f_k")
        plan = Pretrain(
            privacy.pretrain_epochs, privacy.pretrain_corruption, privacy.feature_pretrain
        )
        dense = int(np.prod(self.data.meta.feature_shape)) - len(self.data.meta.categorical)
        rows = train.features
        if privacy.pretrain_rows == "all":  # every row it holds: train first, then by split name
            rest = [s.features for n, s in sorted(self.data.splits.items()) if n != "train"]
            rows = np.concatenate([rows, *rest])
        pretrain_tower(self.f, rows, dense, plan, self.config.seed, self.block, self.device)

    # ----------------------------------------------------------------- the shared f_k and g_k
    @property
    def f(self) -> nn.Module:
        return self.models.reps[SHARED]

    @property
    def f_opt(self) -> torch.optim.Optimizer:
        return self.models.rep_opts[SHARED]

    @property
    def g(self) -> nn.Module | None:
        return self.models.heads.get(SHARED)

    @property
    def g_opt(self) -> torch.optim.Optimizer | None:
        return self.models.head_opts.get(SHARED)

    # ----------------------------------------------------------------- identity and alignment
    @property
    def info(self) -> PartyInfo:
        return party_info(self.party_id, self.data)

    def id_hashes(self, split: str) -> list[bytes]:
        if split not in self._hashes:
            self._hashes[split] = hash_ids(self.split(split).ids.tolist(), self._secret)
        return self._hashes[split]

    # PSI alignment (vfl_core.training.psi): the party's secret never leaves this object.
    def psi_blind(self, split: str, session: str) -> list[bytes]:
        return self.psi.blind(session, split, self.split(split).ids.tolist())

    def psi_apply(self, split: str, session: str, points: Sequence[bytes]) -> list[bytes]:
        self.split(split)
        return self.psi.apply(session, split, points)

    def set_alignment_keys(self, split: str, keys: Sequence[bytes]) -> None:
        """The final PSI values of this party's rows: from now on its batch digests use them."""
        self._psi_keys[split] = check_keys(keys, len(self.split(split)), f"psi keys of {split}")

    def alignment_keys(self, split: str) -> list[bytes]:
        """What the batch digests of `split` are computed over: the PSI values if the
        federation aligned with PSI, else the keyed ID hashes."""
        return self._psi_keys.get(split) or self.id_hashes(split)

    def class_weights(self, split: str) -> np.ndarray | None:
        """Per-row inverse class frequency, for class-balanced resampling (reveals classes to
        the coordinator, which is why balancing is opt-in)."""
        labels = self.split(split).labels
        if labels is None or self.task == REGRESSION:
            return None
        known = labels != UNLABELLED  # an unlabelled row (vfl prepare --labels N) weighs 0
        counts = np.bincount(labels[known], minlength=self.data.meta.num_classes)
        weights = 1.0 / np.maximum(counts.astype(np.float64), 1.0)
        return np.where(known, weights[np.maximum(labels, 0)], 0.0)

    def validation_strata(self) -> np.ndarray | None:
        """Each training row's stratified validation draw (float32; None without labels or
        for regression): vfl_core.training.strata.draws."""
        labels = self.split("train").labels
        if labels is None or self.task == REGRESSION:
            return None
        return strata.draws(labels, self.config.seed, self.block)

    # ----------------------------------------------------------------- the shared steps
    # LASER-VFL's and its baselines' (vfl_core.methods.laser.party_steps); a method with its own
    # party state (ProgramHooks.party_state) embeds through that instead.
    def embed(self, call: EmbedCall) -> np.ndarray:
        if self.roles is not None:  # a method's own (dvfl: a guest's activations; dlvm: an expert)
            return self.roles.embed(call)
        return self.laser.embed(call)

    def fuse(self, call: FuseCall) -> FuseResult:
        return self.laser.fuse(call)

    def backward(self, call: BackwardCall) -> None:
        self.laser.backward(call)

    def embedded_shape(self, round_id: int) -> tuple[int, int] | None:
        """The shape of the training embedding kept for `round_id` and not yet stepped (None:
        none), for an earlier round's Backward on the direct plane with staleness."""
        state = self.laser.rounds.get(round_id)  # (what it sent: its shape, also before a
        if state is None or state.wire is None or state.stepped:  # --fresh-own-tower's Fuse)
            return None
        return (int(state.wire.shape[0]), int(state.wire.shape[1]))

    def embedded(self, round_id: int) -> bool:
        return self.embedded_shape(round_id) is not None

    def oldest_unstepped(self) -> int | None:
        """The earliest round kept whose embedding f_k has not stepped on yet (None: none)."""
        rounds = self.laser.rounds
        due = [r for r, s in rounds.items() if s.wire is not None and not s.stepped]
        return min(due, default=None)

    def train(self, call: TrainCall) -> TrainResult:
        """A pipelined call (vfl_core.training.pipeline): its backwards, fuses and embeds."""
        return self.laser.train(call)

    # ----------------------------------------------------------------- a method's own steps
    def step(self, method: str, step: str, call: Any) -> Any:
        """One step of a method that brings its own phases (vfl_core.methods): its handler,
        with this party, on a call already checked against the step's schema."""
        if method != self.config.method:
            raise ProtocolError(f"party {self.party_id} trains {self.config.method}, not {method}")
        return self.spec.step(step).handler(self, call)

    @property
    def dvfl(self) -> DvflRoles | None:
        """The party's DVFL tiers, when it trains dvfl."""
        return self.roles if self.config.method == "dvfl" else None

    @property
    def dlvm(self) -> DlvmRoles | None:
        """The party's latent-variable VFL networks, when it trains dlvm."""
        return self.roles if self.config.method == "dlvm" else None

    # ----------------------------------------------------------------- inference and scoring
    def predict(self, call: PredictCall) -> np.ndarray:
        if not self.data.meta.has_labels:
            raise ProtocolError(f"party {self.party_id} holds no labels and has no fusion head")
        if self.dvfl is not None:  # the owner, on the hosts' outputs (its own need not be there)
            return self.dvfl.owner_predict(call.embeddings)
        return self.laser.predict(call)

    def score(self, call: ScoreCall) -> ScoreResult:
        """Aggregates of each named prediction on the call's rows against the party's labels,
        one answer for all batches (vfl_core.inference.scoring says which)."""
        self.check_digest(call.split, call.rows, call.digest)
        labels, classes = self.split(call.split).labels, self.data.meta.num_classes
        if labels is None:
            raise ProtocolError(f"party {self.party_id} holds no labels to score with")
        if self.task != REGRESSION:  # PrivacyConfig.score_epsilon: a randomised copy
            labels = self.guard.score_labels(call.split, labels, classes)
        # blind (encrypted relay): each batch's heads' probabilities, combined here
        calls = unblinded(call, self.spec.combination, self.task, classes, self.config.seed)
        result = summed([score_batch(self.task, classes, labels[c.rows], c) for c in calls])
        return coarsened(result, self.config.privacy.score_bins)

    def replace_split(self, name: str, split: PartySplit | None) -> None:
        """Swap in another evaluation split (e.g. the same test samples with other missingness)."""
        splits = {k: v for k, v in self.data.splits.items() if k != name}
        if split is not None:
            splits[name] = split
        self.data = replace(self.data, splits=splits)  # keeps meta and preprocessing
        self._hashes.pop(name, None)
        self._psi_keys.pop(name, None)
        self._features.pop(name, None)

    # ----------------------------------------------------------------- state
    def state_dict(self) -> dict[str, object]:
        state: dict[str, object] = {"last_round": self.last_round, **self.models.state_dict()}
        if self.data.preprocessing is not None:  # the weights only make sense with it
            state["preprocessing"] = self.data.preprocessing
        if self.roles is not None:  # a method's own models, under its name
            return {**state, self.config.method: self.roles.state_dict()}
        # The shared models also under their short names, for readers of one-model checkpoints.
        state["f"], state["f_opt"] = self.f.state_dict(), self.f_opt.state_dict()
        if self.g is not None and self.g_opt is not None:
            state["g"], state["g_opt"] = self.g.state_dict(), self.g_opt.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        if state.get("preprocessing", self.data.preprocessing) != self.data.preprocessing:
            raise ConfigError(
                f"party {self.party_id}: the checkpoint was trained with another fitted "
                f"preprocessing than this party's data"
            )
        self.models.load_state_dict(state)
        self.last_round = int(state["last_round"])
        self.laser.reset()
        if self.roles is not None:
            self.roles.load_state_dict(state[self.config.method], self.last_round)

    def keep_snapshot(self, round_id: int, state: dict | None = None) -> bool:
        """Keep a copy of the state after `round_id` in memory (early stopping's best epoch so
        far; vfl_core.training.early_stop), replacing the one kept before. `state`: a copy
        kept earlier, read back from disk by a restarted party (default: the copy held of
        `round_id`, if there is one (`hold_snapshot`), else the current state)."""
        if state is None and self.keep_held(round_id):
            return True
        self._kept = (round_id, copy.deepcopy(self.state_dict() if state is None else state))
        return True

    def kept_state(self, round_id: int) -> dict | None:
        """The state kept of `round_id` (None: none kept of it)."""
        return self._kept[1] if self._kept is not None and self._kept[0] == round_id else None

    def keep_held(self, round_id: int) -> bool:
        """Keep the copy held of `round_id` (`hold_snapshot`); False: none held of it."""
        if self._held is None or self._held[0] != round_id:
            return False
        self._kept, self._held = self._held, None
        return True

    def hold_snapshot(self, round_id: int) -> None:
        """Hold a copy of the state after `round_id` in memory (replacing the one held before),
        which a later `keep_snapshot(round_id)` keeps though rounds after it changed the state:
        the late verdict of --overlap-validation (vfl_core.training.late_validation)."""
        self._held = (round_id, copy.deepcopy(self.state_dict()))

    def forget_snapshot_after(self, round_id: int) -> None:
        """Drop the kept copy if it is of a round after `round_id`: a restarted coordinator
        rolled back past it, so it belongs to a future that will not happen."""
        if self._kept is not None and self._kept[0] > round_id:
            self._kept = None

    def restore_snapshot(self, round_id: int) -> bool:
        """Go back to the state kept after `round_id` (weights and optimisers; the round counter
        stays, so later rounds are still told from stale ones). False: none kept of that round
        (this process started after it)."""
        if self._kept is None or self._kept[0] != round_id:
            return False
        self.load_state_dict({**self._kept[1], "last_round": self.last_round})
        return True

    def parameters_vector(self) -> np.ndarray:
        """All weights flattened (for equivalence tests and fingerprints)."""
        if self.roles is not None:
            modules = self.roles.modules()
            return torch.cat(
                [p.detach().cpu().reshape(-1) for m in modules for p in m.parameters()]
            ).numpy()
        return self.models.parameters_vector().numpy()

    # ----------------------------------------------------------------- what methods use
    # The public interface a method's party side builds on (vfl_core.methods.party_port): the
    # party's splits, its rows checked against their digest, its targets and loss, its random
    # streams, the wire's float32 arrays in and out. (Optimisers of a method's own modules:
    # vfl_core.model.model_bank.make_optimizer(module, config).)
    def split(self, split: str) -> PartySplit:
        """The party's split `split`; another is a ProtocolError."""
        try:
            return self.data.splits[split]
        except KeyError:
            raise ProtocolError(f"party {self.party_id} has no '{split}' split") from None

    def check_digest(self, split: str, rows: np.ndarray, digest: bytes) -> None:
        """Refuse rows outside the split, or whose keys' digest is not `digest` (the plans of
        the coordinator and the party disagree)."""
        n = len(self.split(split))
        if rows.dtype.kind not in "iu":
            raise ProtocolError(f"rows for split '{split}' must be integers, not {rows.dtype}")
        if rows.ndim != 1 or rows.size == 0 or rows.min() < 0 or rows.max() >= n:
            raise ProtocolError(f"rows out of range for split '{split}' with {n} samples")
        hashes = self.alignment_keys(split)
        if batch_digest(hashes[int(r)] for r in rows) != digest:
            raise ProtocolError(f"batch digest mismatch on split '{split}': plans disagree")

    def batch(self, split: str, rows: np.ndarray, digest: bytes) -> torch.Tensor:
        """The features of `rows` (checked as by check_digest), (B, *feature_shape)."""
        self.check_digest(split, rows, digest)
        if rows.max() >= len(self.split(split).features):
            raise ProtocolError(
                f"rows of split '{split}' include label-only rows: party {self.party_id} holds "
                f"no features for them"
            )
        if split not in self._features:
            self._features[split] = torch.from_numpy(self.split(split).features).to(self.device)
        return self._features[split][torch.from_numpy(rows).to(self.device)]  # (B, *shape)

    def targets(self, rows: np.ndarray) -> torch.Tensor:
        """The training batch's targets: (B,) classes, or (B, 1) standardised values."""
        labels = self.split("train").labels
        assert labels is not None
        target = torch.from_numpy(labels[rows]).to(self.device)
        if self.task == REGRESSION:
            return self.scaler.standardize(target.unsqueeze(1))  # (B,) -> (B, 1)
        return target

    def stream(self, stream: Stream, *parts: int) -> np.random.Generator:
        """The party's random stream `stream` at `parts` (e.g. the round), keyed by the run's
        seed and the party's block: the same in every process that replays the run."""
        return rng(self.config.seed, stream, *parts, self.block)

    def from_wire(self, array: np.ndarray, what: str, batch: int, width: int) -> torch.Tensor:
        """A received (batch, width) float32 array as a tensor of the party's own."""
        if array.dtype != np.float32 or array.shape != (batch, width):
            got = f"{array.dtype} {tuple(array.shape)}"
            raise ProtocolError(f"{what}: got {got}, expected float32 ({batch}, {width})")
        if not np.isfinite(array).all():
            raise ProtocolError(f"{what}: contains NaN or Inf")
        # A copy into torch's own (64-byte aligned) memory: SIMD kernels may round differently
        # for differently aligned inputs, and numpy buffers from the wire or another party are
        # aligned by chance; this keeps gRPC and in-process runs bit-identical.
        return torch.from_numpy(array).to(self.device, copy=True)

    @staticmethod
    def to_wire(t: torch.Tensor) -> np.ndarray:
        """A tensor as the float32 array that leaves the party (a copy)."""
        return t.detach().to("cpu", torch.float32).numpy().copy()


def party_info(party_id: str, data: PartyData) -> PartyInfo:
    """What a party with this data says about itself (before it has a training config)."""
    meta = data.meta
    return PartyInfo(
        party_id=party_id,
        block=meta.block,
        num_blocks=meta.num_blocks,
        dataset=meta.dataset,
        feature_shape=tuple(meta.feature_shape),
        num_classes=meta.num_classes,
        has_labels=meta.has_labels,
        samples={name: len(split) for name, split in data.splits.items()},
        task=meta.task,
        label_only={name: s.label_only for name, s in data.splits.items() if s.label_only},
    )


def _randomised_labels(data: PartyData, guard: PartyGuard) -> PartyData:
    """`data` with its training labels through the guard's randomised response (classification
    with labels only; the unlabelled rows' marks stay)."""
    train = data.splits.get("train")
    if (
        guard.config.label_epsilon is None
        or train is None
        or train.labels is None
        or data.meta.task == REGRESSION
    ):
        return data
    labels = guard.labels(train.labels, data.meta.num_classes, train.features)
    return replace(data, splits={**data.splits, "train": replace(train, labels=labels)})


def _numeric_fit(data: PartyData, model: ModelConfig) -> NumericFit | None:
    """The numeric columns of this party's TRAINING rows and their quantile bins, for
    model.num_embedding (None: off, an image party, or no training split); the test rows take
    no part, and both transports read the same rows."""
    train = data.splits.get("train")
    if model.num_embedding == "none" or train is None or len(data.meta.feature_shape) != 1:
        return None
    dense = train.features[:, : data.meta.feature_shape[0] - len(data.meta.categorical)]
    return fit_numeric(model.num_embedding, dense, model.num_bins)


def _train_rows(data: PartyData) -> int | None:
    """The training rows this party holds (those it trains on): its own data, read the same way
    by `vfl simulate` and a gRPC client, so the rate they give is the same in both."""
    train = data.splits.get("train")
    return None if train is None else len(train.ids)
