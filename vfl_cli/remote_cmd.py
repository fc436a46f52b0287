"""`vfl evaluate` and `vfl predict`: ask a running coordinator for predictions."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from vfl_cli import defaults
from vfl_cli import table_options as tables
from vfl_cli.errors import user_errors
from vfl_cli.option_groups import with_option_groups
from vfl_core.errors import ConfigError, DataError

if TYPE_CHECKING:  # grpc, numpy and torch: imported when a command runs, not for --help
    from vfl_cli.coordinator_client import Evaluation
    from vfl_core.data.tabular import TableSource
    from vfl_core.protocol import SamplePrediction
    from vfl_wire.security import Security

OPERATOR, DEMO_SECRET = defaults.OPERATOR, defaults.DEMO_SECRET

Opt = typer.Option
TlsDir = Annotated[
    Path | None, Opt(envvar="VFL_TLS_DIR", help="`vfl certs` directory (or its operator/ part)")
]
Identity = Annotated[str, Opt(help="identity to call as (its certificate and token)")]
Insecure = Annotated[bool, Opt(help="plaintext gRPC (a coordinator started with --insecure)")]


def operator_security(tls_dir: Path | None, identity: str, insecure: bool) -> Security:
    """Mutual TLS as the operator (certificate and token from `vfl certs`), or plaintext."""
    from vfl_wire.security import load_security

    return load_security(tls_dir, insecure, identity, need_token=True)


@user_errors
def evaluate(
    coordinator: Annotated[str, Opt(help="coordinator host:port")] = "localhost:50051",
    split: Annotated[str, Opt(help="train | test")] = "test",
    timeout: Annotated[float, Opt(help="seconds to wait for the answer")] = 120.0,
    tls_dir: TlsDir = Path("certs"),
    identity: Identity = OPERATOR,
    insecure: Insecure = False,
) -> None:
    """Evaluate the trained federation with the parties that are live now."""
    from vfl_cli.coordinator_client import CoordinatorClient

    security = operator_security(tls_dir, identity, insecure)
    with CoordinatorClient(coordinator, timeout, security) as client:
        evaluation = client.evaluate(split)
    typer.echo(render_evaluation(evaluation, f"{split} set"))
    if not sum(row.samples for row in evaluation.rows if row.observed != "all"):
        # an empty table is no result: say so, and exit non-zero
        raise ConfigError(f"nothing scored: no live label party answered for the {split} set")


def render_evaluation(ev: Evaluation, title: str) -> str:
    from vfl_core.inference.metrics import format_table, unscored_note

    live = ",".join(map(str, ev.live_blocks)) or "none"
    lines = [format_table(ev.rows, title=f"{title} (live blocks: {live}; {ev.seconds:.2f}s)")]
    for block, (batches, answered) in ev.partly_live().items():
        lines.append(
            f"(block {block} answered {answered} of the {batches} batches holding its samples: it "
            "came back or went away during this evaluation; each row names the blocks it used)"
        )
    if ev.unscored:
        lines.append(unscored_note(ev.unscored, live=True))
    return "\n".join(lines)


@user_errors
@with_option_groups
def predict(
    coordinator: Annotated[str, Opt(help="coordinator host:port")] = "localhost:50051",
    split: Annotated[str, Opt(help="train | test")] = "test",
    ids: Annotated[str | None, Opt(help="comma-separated sample IDs (default: all)")] = None,
    ids_file: Annotated[Path | None, Opt(help="file with one sample ID per line")] = None,
    secret: Annotated[str, Opt(envvar="VFL_SECRET", help="federation secret")] = DEMO_SECRET,
    out: Annotated[Path | None, Opt(help="CSV file for the predictions")] = None,
    label_names: Annotated[
        Path | None,
        Opt(
            help="classification: a label party's preprocess.json (or its party directory): "
            "adds each class's label as written in its table"
        ),
    ] = None,
    data: Annotated[
        Path | None,
        Opt(
            help="this party's directory or its own CSV/Parquet table (with --id-column and "
            "--block, as given to vfl-client): names each sample it holds by its own ID, from "
            "the row the coordinator sends (works after a PSI alignment)"
        ),
    ] = None,
    block: Annotated[int | None, Opt(help="table: this party's block")] = None,
    table_columns: tables.TableColumns = tables.TableColumns(),
    test_data: Annotated[
        Path | None,
        Opt(
            help="table: its test rows' file, as given to vfl-client",
            show_default="split --data by ID",
        ),
    ] = None,
    test_fraction: tables.TestFraction = tables.DEFAULTS["test_fraction"],
    timeout: Annotated[float, Opt(help="seconds to wait for the answer")] = 120.0,
    tls_dir: TlsDir = Path("certs"),
    identity: Identity = OPERATOR,
    insecure: Insecure = False,
) -> None:
    """Predict samples by ID (hashed with the federation secret before they leave this host).

    By ID only with a coordinator that aligned with --alignment hmac; after a PSI alignment the
    coordinator knows no hashes, so ask for all rows (no --ids) and give --data to see
    your own IDs."""
    from vfl_cli.coordinator_client import CoordinatorClient
    from vfl_core.training.alignment import hash_ids

    security = operator_security(tls_dir, identity, insecure)
    names = _read_ids(ids, ids_file)
    classes = _read_classes(label_names) if label_names is not None else None
    own = None
    if data is not None:
        table = _table(data, block, table_columns, test_data, test_fraction)
        own = _own_ids(data, split) if table is None else _table_ids(table, split)
    hashes = hash_ids(names, secret.encode()) if names is not None else None
    by_hash = dict(zip(hashes, names, strict=True)) if names is not None and hashes else {}
    with CoordinatorClient(coordinator, timeout, security) as client:
        predictions = client.predict(split, hashes)
    if classes and any(_is_regression(p) for p in predictions):
        raise ConfigError("--label-names is for classification; this federation predicts values")
    rows = [
        {
            "id": _sample_id(p, by_hash, own),
            "observed_blocks": "+".join(map(str, p.observed)),  # as --parties writes blocks
            "party_rows": " ".join(f"{b}:{r}" for b, r in p.rows.items()),
            **_prediction_columns(p),
            **({"predicted_label": _label(classes, p.predicted_class)} if classes else {}),
        }
        for p in predictions
    ]
    if out is not None:
        _write_csv(out, rows)
        typer.echo(f"{len(rows)} predictions written to {out}")
    else:
        for row in rows[:50]:
            typer.echo("  ".join(f"{k}={v}" for k, v in row.items()))
        if len(rows) > 50:
            typer.echo(f"... {len(rows) - 50} more (use --out FILE)")
    if names is not None and len(rows) < len(names):
        typer.echo(f"{len(names) - len(rows)} IDs are not known to the federation", err=True)


def _own_ids(party_dir: Path, split: str) -> tuple[int, list[str]]:
    """(block, ID of each row of `split`) of a party directory: the party's own row order."""
    from vfl_core.data.party_dir import load_party_dir

    data = load_party_dir(party_dir)
    if split not in data.splits:
        raise DataError(f"{party_dir}: no {split!r} split")
    return data.meta.block, [str(i) for i in data.splits[split].ids]


def _table(
    data: Path,
    block: int | None,
    columns: tables.TableColumns,
    test_data: Path | None,
    test_fraction: float,
) -> TableSource | None:
    """The table `data` names, read as vfl-client reads it (None: a party directory)."""
    from vfl_core.data.table_files import is_table_file

    if not is_table_file(data):
        tables.refuse_table_options(
            data, columns, tables.TableEncoding(), block=block, test_data=test_data
        )
        return None
    return tables.table_source(
        data,
        columns,
        tables.TableEncoding(),
        test_path=test_data,
        test_fraction=test_fraction,
        block=block,
        clients=None if block is None else block + 1,  # K only bounds the block here
    )


def _table_ids(source: TableSource, split: str) -> tuple[int, list[str]]:
    """(block, ID of each row of `split`) of a party that serves its own table."""
    from vfl_core.data.tabular import split_row_ids

    ids = split_row_ids(source)
    if split not in ids:
        raise DataError(f"{source.path}: no {split!r} rows (the test split is empty)")
    return source.block, ids[split]


def _sample_id(
    p: SamplePrediction, by_hash: dict[bytes, str], own: tuple[int, list[str]] | None
) -> str:
    """The ID asked for, else this party's own ID of the sample (--data), else the key's
    hex (an HMAC hash; after PSI a random value that names nothing outside this run)."""
    if p.id_hash in by_hash:
        return by_hash[p.id_hash]
    if own is not None:
        block, ids = own
        row = p.rows.get(block)
        if row is None:
            return ""  # a sample this party does not hold: its party_rows name the holders
        if row >= len(ids):
            raise DataError(
                f"the coordinator names row {row} of block {block}, which has {len(ids)} rows: "
                "--data is not the directory this party serves"
            )
        return ids[row]
    return p.id_hash.hex()


def _prediction_columns(p: SamplePrediction) -> dict[str, object]:
    """Classification: the class, its probability and each head's class. Regression (a
    prediction with a value, or none at all from a regression federation): the values."""
    if _is_regression(p):
        value = "" if p.predicted_value is None else f"{p.predicted_value:.6g}"
        heads = {f"party{b}": f"{float(q[0]):.6g}" for b, q in sorted(p.party_probs.items())}
        return {"predicted_value": value, **heads}
    return {
        "predicted_class": p.predicted_class,
        # the probability of the class predicted (with a decision threshold, not always the top)
        "confidence": _confidence(p),
        **{f"party{b}": int(q.argmax()) for b, q in sorted(p.party_probs.items())},
    }


def _confidence(p: SamplePrediction) -> str:
    if p.federation is None:
        return ""
    top = p.predicted_class if p.predicted_class >= 0 else int(p.federation.argmax())
    return f"{p.federation[top]:.4f}"


def _is_regression(p: SamplePrediction) -> bool:
    """A prediction with a value, or none at all from a regression federation (one output)."""
    return p.predicted_value is not None or (
        p.federation is not None and p.federation.shape == (1,)
    )


def _read_ids(ids: str | None, ids_file: Path | None) -> list[str] | None:
    if ids is not None:
        return [x.strip() for x in ids.split(",") if x.strip()]
    if ids_file is not None:
        try:
            return [x.strip() for x in ids_file.read_text().splitlines() if x.strip()]
        except OSError as err:
            raise DataError(f"cannot read {ids_file}: {err.strerror}") from None
    return None


def _read_classes(path: Path) -> tuple[str, ...]:
    """The class mapping a label party saved with its fitted preprocessing."""
    from vfl_core.data.party_dir import PREPROCESS_FILE
    from vfl_core.data.preprocess import TabularPreprocessor

    file = path / PREPROCESS_FILE if path.is_dir() else path
    try:
        text = file.read_text()
    except OSError as err:
        raise DataError(f"cannot read {file}: {err.strerror}") from None
    fitted = TabularPreprocessor.from_json(text, str(file))
    if fitted.task == "regression":
        raise ConfigError(
            f"--label-names is for classification; {file} is a regression party's "
            f"preprocessing (its predictions are values, without label names)"
        )
    if not fitted.classes:
        raise DataError(f"{file}: no label classes (not a label party's preprocessing)")
    return fitted.classes


def _label(classes: tuple[str, ...], index: int) -> str:
    return classes[index] if 0 <= index < len(classes) else ""


def _block(field: str) -> int:
    return int(field[5:])


def _write_csv(path: Path, rows: list[dict[str, object]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fields = list(dict.fromkeys(k for r in rows for k in r))
    heads = sorted((f for f in fields if f.startswith("party") and f[5:].isdigit()), key=_block)
    fields = [f for f in fields if f not in heads] + heads  # party0, party1, ... in block order
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
