"""One name per idea: the help panel of every option of the `vfl`, `vfl-client` and
`vfl-coordinator` commands, and the old spellings still accepted for a release.

An option's name is its idea: one spelling across commands (`--p-miss` everywhere, never
`--p-miss-train` here and `--p-miss` there). A spelling replaced by another stays accepted for a
release through `DEPRECATED` (vfl_cli.command rewrites it and says so on stderr);
tests/test_cli_help.py fails on an option named by a deprecated spelling, on an option named by
a spelling that `SYNONYMS` gives to another, and on an option of no panel.
"""

from __future__ import annotations

DATA, MODEL, TRAINING = "Data", "Model", "Training"
FEDERATION, FAULTS, SECURITY, OUTPUT = "Federation", "Faults", "Security", "Output"
# The panels in the order a help screen shows them; first typer's own (--config, --help).
ORDER = [None, DATA, MODEL, TRAINING, FEDERATION, FAULTS, SECURITY, OUTPUT]

# Old spelling -> the option that replaced it and the commands that had it. Accepted until
# release 0.3, with a one-line notice on stderr.
DEPRECATED: dict[str, tuple[str, tuple[str, ...]]] = {
    # vfl prepare, vfl demo and vfl bench already said --p-miss
    "--p-miss-train": ("--p-miss", ("simulate",)),
    "--p-train": ("--p-miss", ("accuracy",)),
    "--p-test": ("--p-miss-test", ("accuracy",)),
    # vfl prepare already said --missing
    "--missing-train": ("--missing", ("simulate",)),
    "--train": ("--missing", ("dlvm",)),
    "--test": ("--missing-test", ("dlvm",)),
    # vfl-client already said --data and --test-data for a party's own table
    "--csv": ("--data", ("simulate", "prepare")),
    "--test-csv": ("--test-data", ("simulate", "prepare")),
    "--party-dir": ("--data", ("predict",)),
    # vfl simulate, vfl demo and vfl-coordinator already said --clients for K
    "--num-blocks": ("--clients", ("prepare", "client")),
    # vfl simulate, vfl demo and vfl-coordinator already said --fault-rate and --rejoin-rate
    "--fail-rate": ("--fault-rate", ("faults", "dvfl")),
    "--rejoin": ("--rejoin-rate", ("faults", "dvfl")),
    # the training options' names
    "--owner-epochs": ("--dvfl-owner-epochs", ("dvfl",)),
    "--stage2-epochs": ("--dlvm-stage2-epochs", ("dlvm",)),
    "--model": ("--representation", ("parties", "scaling")),
    "--train-samples": ("--max-train", ("throughput",)),
}

# Other spellings a new option of an existing idea might take (none names an option today): the
# first is the idea's option name, the others must not name an option.
SYNONYMS: tuple[tuple[str, ...], ...] = (
    ("--data", "--party-data", "--table", "--party-dir"),
    ("--test-data", "--test-table"),
    ("--fault-rate", "--failure-rate"),
    ("--out", "--output", "--out-dir"),
    ("--secret", "--federation-secret"),
    ("--register-timeout", "--registration-timeout"),
)

# The panel of each option, by name (without its leading dashes). An option of a command
# missing here is shown in typer's "Options" panel.
PANELS: dict[str, str] = {
    **dict.fromkeys(
        [
            "data",
            "data-path",
            "dataset",
            "test-data",
            "test-fraction",
            "id-column",
            "label-column",
            "features",
            "ignore-columns",
            "categorical",
            "num-classes",
            "max-onehot",
            "task",
            "positive-class",
            "p-miss",
            "p-miss-test",
            "p-miss-per-party",
            "nonuniform",
            "missing",
            "missing-test",
            "labels",
            "label-blocks",
            "keep-labels",
            "layout",
            "prefix",
            "columns",
            "preprocessing",
            "block",
            "ids",
            "ids-file",
            "split",
            "label-names",
            "serve-bundle",
            "checkpoint",
        ],
        DATA,
    ),
    **dict.fromkeys(
        [
            "representation",
            "embed-dim",
            "hidden",
            "head",
            "head-hidden",
            "dropout",
            "norm",
            "categorical-dim",
            "num-embedding",
            "num-bins",
            "num-embedding-dim",
            "ensemble",
            "dlvm-latent-dim",
            "dlvm-hidden",
            "dlvm-mnar",
            "dlvm-mnar-model",
            "dlvm-posterior",
            "dlvm-predict",
            "dlvm-predict-samples",
            "dlvm-kappa",
        ],
        MODEL,
    ),
    **dict.fromkeys(
        [
            "method",
            "seed",
            "epochs",
            "batch-size",
            "lr",
            "weight-decay",
            "balance",
            "scheduler",
            "label-smoothing",
            "dvfl-period",
            "dvfl-host-steps",
            "dvfl-owner-epochs",
            "dvfl-owner-patience",
            "dvfl-owner-min-epochs",
            "dvfl-period-epochs",
            "serve-feature-only",
            "wire-dtype",
            "staleness",
            "local-steps",
            "dlvm-stage2-epochs",
            "dlvm-expert-dropout",
            "dlvm-stage2",
            "early-stop-patience",
            "min-improvement",
            "overlap-validation",
            "validation-fraction",
            "threshold",
            "choice",
            "subset-choice",
            "concat-head",
            "concat-choice",
            "validation-split",
            "target-transform",
            "device",
            "threads",
            "pipeline",
            "max-inflight",
        ],
        TRAINING,
    ),
    **dict.fromkeys(
        [
            "clients",
            "coordinator",
            "listen",
            "advertise",
            "party-id",
            "quorum",
            "register-timeout",
            "rejoin-timeout",
            "align-retry",
            "farewell",
            "alignment",
            "deadline",
            "run-id",
            "serve",
            "address",
            "timeout",
            "workdir",
            "peer",
            "embed-for",
            "http",
            "lookup",
            "deadline-ms",
            "batch-window-ms",
        ],
        FEDERATION,
    ),
    **dict.fromkeys(
        [
            "fault-rate",
            "rejoin-rate",
            "link-loss",
            "fault-entity",
            "down-after",
            "retry-every",
            "pause-probe",
            "kill-block",
            "fault-kind",
            "fault-every",
        ],
        FAULTS,
    ),
    **dict.fromkeys(
        [
            "tls-dir",
            "insecure",
            "token-file",
            "http-auth",
            "http-token-file",
            "http-client",
            "secret",
            "private-tower-seed",
            "identity",
            "server-name",
            "parties",
            "hosts",
            "http-callers",
            "days",
            "force",
            "audit-log",
            "privacy-gradient-defence",
            "privacy-direction-power",
            "privacy-feature-pretrain",
            "privacy-pretrain-epochs",
            "privacy-pretrain-corruption",
            "privacy-pretrain-rows",
            "privacy-feature-tower",
            "privacy-embedding-clip",
            "privacy-embedding-noise",
            "privacy-label-epsilon",
            "privacy-label-prior",
            "privacy-score-epsilon",
            "privacy-score-bins",
            "encrypt-relay",
            "data-plane",
        ],
        SECURITY,
    ),
    **dict.fromkeys(
        [
            "out",
            "run-dir",
            "eval-every",
            "checkpoint-dir",
            "checkpoint-every",
            "port-file",
            "progress",
            "log-level",
            "metric",
            "bundle-dir",
        ],
        OUTPUT,
    ),
}
