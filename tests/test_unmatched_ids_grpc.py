"""A party whose sample IDs match nobody's: the run is refused before training, and every
party exits with the cause, each showing a few of its own IDs (which never leave it), over gRPC
with real processes.

Parties from their own CSV files; one writes its customer IDs in lower case (`c00001` where the
others write `C00001`), so none of its IDs matches.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from harness import Cluster
from tabular_tables import LABEL_COLUMN, write_tables

from vfl_core.training.alignment import UNMATCHED

BLOCKS = {"bank": 0, "retail": 1, "telecom": 2}
ID_COLUMN = "customer_id"


def _lower_ids(path: Path) -> None:
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    for row in rows[1:]:
        row[0] = row[0].lower()
    with path.open("w", newline="") as f:
        csv.writer(f).writerows(rows)


def _args(path: Path, blocks: int = 3) -> list[str]:
    args = ["--id-column", ID_COLUMN, "--block", str(BLOCKS[path.stem])]
    args += ["--clients", str(blocks)]
    if path.stem == "bank":
        args += ["--label-column", LABEL_COLUMN]
    else:
        args += ["--num-classes", "2"]
    return args


@pytest.mark.slow
def test_given_a_party_whose_ids_match_nothing_when_aligned_then_every_party_is_refused(
    tmp_path: Path,
) -> None:
    paths = write_tables(tmp_path / "tables", n=200)
    _lower_ids(paths["telecom"])
    with Cluster(tmp_path / "cluster") as cluster:
        coord, clients = cluster.federation(
            [paths[name] for name in BLOCKS], epochs=1, client_extra=_args
        )
        for client in clients:  # every party hears why, before any training round
            assert client.wait(120) == 2, cluster.describe()
            log = client.log()
            assert "error: " + UNMATCHED in log, log[-3000:]
            assert "block 2 (party2) shares none of its" in log
            assert "This party's training IDs begin 'C" in log or "begin 'c" in log
        assert "This party's training IDs begin 'c" in clients[2].log()  # its own, lower case
        assert "This party's training IDs begin 'C" in clients[0].log()
        assert "12345.0 is read as 12345" in clients[2].log()
        assert coord.wait(120) == 2, cluster.describe()
        assert "error: " + UNMATCHED in coord.log()
        assert "Traceback" not in coord.log()
