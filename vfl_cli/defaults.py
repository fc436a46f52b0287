"""The config models' defaults and the names the options list, as
vfl_cli/defaults_source.py reads them from the models: the commands show them in their help
without importing torch, grpc or the models (so `--help` answers at once). Generated: do not
edit; run `python -m vfl_cli.defaults_source` (then `ruff format vfl_cli/defaults.py`) after
changing a model's default."""

from pathlib import Path

TRAIN = {
    "method": "laser",
    "seed": 0,
    "epochs": 60,
    "batch_size": "auto",
    "eval_batch_size": 512,
    "lr": "auto",
    "weight_decay": 0.0001,
    "lane_weight_decay": 0.03,
    "round_loss": "auto",
    "optimizer": "adam",
    "momentum": 0.9,
    "optimizer_kernel": "fused",
    "scheduler": "auto",
    "balance": "none",
    "serve_feature_only": True,
    "label_smoothing": 0.0,
    "weight_average": "none",
    "ema_decay": 0.97,
    "wire_dtype": "float32",
    "staleness": None,
    "overlap_validation": None,
    "epoch_flow": None,
    "fresh_own_tower": None,
    "local_steps": 0,
    "early_stop_patience": None,
    "early_stop_min_improvement": 0.01,
    "early_stop_min_epochs": None,
    "validation_fraction": 0.1,
    "unvalidated_heads": "auto",
    "threshold": "auto",
    "subset_choice": "validation",
    "concat_head": None,
    "concat_choice": "all",
    "concat_weight": 5.0,
    "validation_split": "random",
    "target_transform": "none",
    "encrypt_relay": False,
    "data_plane": None,
}
MODEL = {
    "representation": "auto",
    "embed_dim": 64,
    "hidden": (256,),
    "head": "auto",
    "head_hidden": 64,
    "dropout": 0.0,
    "norm": "none",
    "categorical_dim": 0,
    "num_embedding": "none",
    "num_embedding_dim": 16,
    "num_bins": 16,
    "ensemble": 1,
    "linear_lane": None,
}
DVFL = {
    "guest_hidden": (100,),
    "guest_dim": 80,
    "host_hidden": (200,),
    "host_dim": 160,
    "owner_hidden": (160, 40),
    "period": 1,
    "host_steps": 2,
    "owner_epochs": 60,
    "owner_lr": 0.08,
    "owner_momentum": 0.0,
    "owner_patience": 0,
    "owner_validation": 0.2,
    "owner_min_epochs": 0,
    "period_epochs": None,
}
DLVM = {
    "latent_dim": 16,
    "z_dim": 8,
    "hidden": (128,),
    "kappa": 10,
    "predict_samples": 50,
    "predict": "snis",
    "stage2_epochs": 30,
    "posterior": "mean",
    "stage2": "frozen",
    "mnar": False,
    "mnar_model": "features",
    "expert_dropout": 0.0,
}
PRIVACY = {
    "gradient_defence": "none",
    "direction_power": 1.0,
    "feature_pretrain": "none",
    "pretrain_epochs": 20,
    "pretrain_corruption": 0.3,
    "pretrain_rows": "train",
    "feature_tower": "model",
    "embedding_clip": None,
    "embedding_noise": 0.0,
    "delta": 1e-05,
    "label_epsilon": None,
    "label_prior": "uniform",
    "score_epsilon": None,
    "score_bins": 1000,
}
CLIENT = {
    "table": None,
    "coordinator": "localhost:50051",
    "block": None,
    "party_id": None,
    "listen": "auto",
    "advertise": None,
    "device": "auto",
    "secret": "vfl-demo-secret",
    "threads": 1,
    "register_timeout_s": 300.0,
    "checkpoint_dir": None,
    "tls_dir": Path("certs"),
    "insecure": False,
    "token_file": None,
    "alignment": "psi",
    "bundle_dir": None,
    "private_tower_seed": None,
}
COORDINATOR = {
    "listen": "0.0.0.0:50051",
    "clients": 4,
    "quorum": None,
    "register_timeout_s": 300.0,
    "rejoin_timeout_s": 300.0,
    "pause_probe_s": 5.0,
    "align_retry_s": 60.0,
    "farewell_s": 10.0,
    "down_after": 3,
    "retry_every": 10,
    "out": Path("runs/coordinator"),
    "serve": False,
    "run_id": None,
    "audit_log": None,
    "tls_dir": Path("certs"),
    "insecure": False,
    "parties": None,
    "alignment": "psi",
    "max_inflight": 8,
    "checkpoint_dir": None,
    "checkpoint_every": 0,
    "eval_every": 0,
    "pipeline": True,
}
DEADLINES = {
    "embed": 10.0,
    "fuse": 10.0,
    "backward": 10.0,
    "predict": 10.0,
    "align": 60.0,
    "shutdown": 2.0,
    "checkpoint": 30.0,
}
FAULTS = {
    "fail_rate": 0.0,
    "rejoin_rate": 1.0,
    "link_loss": 0.0,
    "at_inference": False,
    "spare": (),
    "entity": "guest",
}
METHODS = (
    "laser",
    "local",
    "ensemble",
    "svfl",
    "vanilla",
    "combinatorial",
    "plug",
    "zerofill",
    "stale",
    "dvfl",
    "dlvm",
)
FAULT_ENTITIES = ("guest", "host", "link")
TASKS = ("classification", "regression")
MAX_ONEHOT = 16
AUTO_PATIENCE = 6
AUTO_SMALL_EPOCHS = 30
AUTO_STALE_MIN_EPOCHS = 16
AUTO_STALE_PATIENCE = 8
AUTO_STALENESS = 5
AUTO_EPOCH_FLOW = True
AUTO_FRESH_OWN_TOWER = True
AUTO_ROUNDS_PER_EPOCH = 4
AUTO_MAX_BATCH = 4096
AUTO_TABLE_LR = 0.005
DEFAULT_BATCH = 64
DEFAULT_LR = 0.001
DECAY_HALF_LIFE = 16.0
TEST_FRACTION = 0.2
DEMO_SECRET = "vfl-demo-secret"
OPERATOR = "operator"
