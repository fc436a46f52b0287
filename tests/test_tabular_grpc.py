"""Three parties from their own CSV files, over gRPC with real processes (issue 7 acceptance).

A bank (labels), a retailer and a telecom share only part of their customers; their tables have
numeric and categorical columns (one of high cardinality) and empty cells. They train, then
`vfl predict` asks for customers that only some parties hold. The coordinator's audit log of
every message shows that no column name, category or fitted statistic ever left a party.
"""

from __future__ import annotations

import csv
import signal
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from harness import SECRET, Cluster, Coordinator
from tabular_tables import LABEL_COLUMN, LABELS, write_tables
from typer.testing import CliRunner

from vfl_cli.app import app
from vfl_core.data.party_dir import PartyData
from vfl_core.data.preprocess import TabularPreprocessor
from vfl_core.data.table_files import read_table
from vfl_core.data.tabular import TableSource, load_table_party
from vfl_core.persistence.checkpoint import load_checkpoint
from vfl_wire.audit import AuditRecord, read_audit

RUN_TIMEOUT_S = 120.0
BLOCKS = {"bank": 0, "retail": 1, "telecom": 2}
ID_COLUMN = "customer_id"


def _client_args(ckpt: Path) -> Callable[[Path], list[str]]:
    def extra(path: Path) -> list[str]:
        args = ["--id-column", ID_COLUMN, "--block", str(BLOCKS[path.stem]), "--clients", "3"]
        args += ["--checkpoint-dir", str(ckpt)]
        if path.stem == "bank":
            args += ["--label-column", LABEL_COLUMN]
        return args

    return extra


def _local_party(path: Path) -> tuple[PartyData, TabularPreprocessor]:
    """What the client builds from the same file (the fit is deterministic)."""
    label = LABEL_COLUMN if path.stem == "bank" else None
    return load_table_party(
        TableSource(
            path=path,
            id_column=ID_COLUMN,
            label_column=label,
            block=BLOCKS[path.stem],
            num_blocks=3,
            num_classes=None if label else 2,
        )
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    root = tmp_path_factory.mktemp("tabular")
    paths = write_tables(root / "tables", n=400)
    audit, ckpt = root / "messages.audit", root / "checkpoints"
    with Cluster(root / "cluster") as cluster:
        coord, clients = cluster.federation(
            [paths[name] for name in BLOCKS],
            epochs=2,
            serve=True,
            extra=["--audit-log", str(audit)],
            client_extra=_client_args(ckpt),
        )
        cluster.wait_serving(coord, RUN_TIMEOUT_S)
        predicted = _predict(coord, paths, ckpt, root)
        own_ids = _predict_own_ids(coord, paths["retail"], root)
        coord.signal(signal.SIGTERM)
        assert coord.wait(30) == 0, cluster.describe()
        for client in clients:
            assert client.wait(30) == 0, cluster.describe()
    yield {
        "paths": paths,
        "predicted": predicted,
        "own_ids": own_ids,
        "audit": audit,
        "ckpt": ckpt,
    }


def _test_ids(paths: dict[str, Path]) -> dict[str, set[int]]:
    """Each test-split customer and the blocks that hold it."""
    holders: dict[str, set[int]] = {}
    for name, path in paths.items():
        data, _ = _local_party(path)
        for sample in data.splits["test"].ids.tolist():
            holders.setdefault(sample, set()).add(BLOCKS[name])
    return holders


def _predict(
    coord: Coordinator, paths: dict[str, Path], ckpt: Path, root: Path
) -> dict[str, tuple[set[int], dict[str, str]]]:
    """`vfl predict` for two customers of each partial pattern the bank is part of."""
    holders = _test_ids(paths)
    wanted = {}
    for pattern in ({0, 1}, {0, 2}, {0}):
        matches = sorted(i for i, held in holders.items() if held == pattern)
        assert len(matches) >= 2, f"no test customer held by exactly {pattern}"
        wanted.update({i: pattern for i in matches[:2]})
    out = root / "predictions.csv"
    args = ["predict", "--coordinator", coord.address, "--secret", SECRET, "--insecure"]
    args += ["--ids", ",".join(wanted), "--out", str(out)]
    args += ["--label-names", str(ckpt / "party0.preprocess.json")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    with out.open() as f:
        rows = {row["id"]: row for row in csv.DictReader(f)}
    return {i: (pattern, rows.get(i, {})) for i, pattern in wanted.items()}


def _predict_own_ids(coord: Coordinator, table: Path, root: Path) -> dict[str, list[dict]]:
    """`vfl predict --data` of every test row, named by the retailer's own IDs: from its own
    table as it trained on it (no vfl prepare), and from the party directory `vfl prepare`
    writes of the same table."""
    base = ["predict", "--coordinator", coord.address, "--secret", SECRET, "--insecure"]
    party_dir = root / "retail-dir"
    args = ["prepare", "--data", str(table), "--id-column", ID_COLUMN, "--block", "1"]
    args += ["--clients", "3", "--num-classes", "2", "--out", str(party_dir)]
    prepared = CliRunner().invoke(app, args)
    assert prepared.exit_code == 0, prepared.output
    out = {}
    for name, data in (
        ("table", ["--data", str(table), "--id-column", ID_COLUMN, "--block", "1"]),
        ("directory", ["--data", str(party_dir)]),
    ):
        path = root / f"own-{name}.csv"
        result = CliRunner().invoke(app, [*base, *data, "--out", str(path)])
        assert result.exit_code == 0, result.output
        with path.open() as f:
            out[name] = list(csv.DictReader(f))
    return out


# ------------------------------------------------------------------------------ predictions


@pytest.mark.slow
def test_given_a_csv_party_when_predicting_with_its_table_then_rows_carry_its_own_ids(
    run: dict,
) -> None:
    from_table, from_dir = run["own_ids"]["table"], run["own_ids"]["directory"]
    assert from_table == from_dir  # no `vfl prepare` needed: the same IDs, rows and classes
    held = [row for row in from_table if "1" in row["observed_blocks"].split("+")]
    assert held and all(row["id"] for row in held)
    test_ids = set(_local_party(run["paths"]["retail"])[0].splits["test"].ids.tolist())
    assert {row["id"] for row in held} <= test_ids
    assert all(not row["id"] for row in from_table if row not in held)  # others' samples


@pytest.mark.slow
def test_given_csv_parties_with_partial_overlap_when_predicting_then_partial_ids_answered(
    run: dict,
) -> None:
    for sample, (pattern, row) in run["predicted"].items():
        assert row, f"no prediction for {sample}"
        assert set(map(int, row["observed_blocks"].split("+"))) == pattern, sample
        assert int(row["predicted_class"]) in (0, 1)
        assert row["predicted_label"] == LABELS[int(row["predicted_class"])]
        assert 0.5 <= float(row["confidence"]) <= 1.0
    # the label party kept its fit next to its checkpoints, and the checkpoint holds it too
    kept = TabularPreprocessor.from_json((run["ckpt"] / "party0.preprocess.json").read_text(), "k")
    assert kept == _local_party(run["paths"]["bank"])[1]
    assert kept.classes == LABELS
    state = load_checkpoint(run["ckpt"] / "party0.pt", None)["state"]
    assert state["preprocessing"] == kept.model_dump(mode="json")


# ------------------------------------------------------------------------------ the wire


def _secrets(paths: dict[str, Path]) -> tuple[set[str], list[bytes]]:
    """Column names, categories and class names of every table; the fitted statistics."""
    words: set[str] = set()
    numbers: list[bytes] = []
    for path in paths.values():
        words |= set(read_table(path).columns)
        fitted = _local_party(path)[1]
        words |= set(fitted.classes)
        for spec in fitted.columns:
            words |= set(spec.categories)
            if spec.kind == "numeric":
                for value in (spec.mean, spec.std):
                    words.add(repr(value))
                    numbers += [struct.pack(f, value) for f in ("<d", ">d", "<f", ">f")]
    return words, numbers


@pytest.mark.slow
def test_given_csv_run_when_searching_every_message_then_no_names_categories_or_statistics(
    run: dict,
) -> None:
    records: list[AuditRecord] = read_audit(run["audit"])
    kinds = {r.rpc for r in records}
    # the default pipelined engine: a round's Backward and the next Embed travel as one Train call
    assert {"Register", "Embed", "Train", "Predict"} <= kinds
    blob = b"\x00".join(r.data for r in records)
    assert b"party0" in blob and b"tabular" in blob  # positive control: plain text is found
    words, numbers = _secrets(run["paths"])
    assert {"yearly_income", "merchant_name", "merchant-07", "Eastwold", "no"} <= words
    assert len(numbers) == 4 * 2 * 4  # four encodings of mean and std of four numeric columns
    for word in words:
        if len(word) < 4:  # "no"/"yes" occur in binary data by chance; checked below as labels
            continue
        for encoding in ("utf-8", "utf-16-le"):
            assert word.encode(encoding) not in blob, f"{word!r} ({encoding}) crossed the wire"
    for number in numbers:
        assert number not in blob, f"a fitted statistic {number.hex()} crossed the wire"
    for label in LABELS:  # the class names never go in a text field of any message
        assert f'"{label}"'.encode() not in blob
