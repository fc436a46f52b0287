"""A party whose sample IDs match nobody's learns it in its own log and exits with the cause
(issue 27 item 6), over gRPC with real processes.

Parties from their own CSV files; one writes its customer IDs in lower case (`c00001` where the
others write `C00001`), so none of its IDs matches. Before this, it served the whole run and
exited 0, its log silent; the coordinator alone warned.
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
def test_given_a_party_whose_ids_match_nothing_when_training_starts_then_it_exits_saying_why(
    tmp_path: Path,
) -> None:
    paths = write_tables(tmp_path / "tables", n=200)
    _lower_ids(paths["telecom"])
    with Cluster(tmp_path / "cluster") as cluster:
        coord, clients = cluster.federation(
            [paths[name] for name in BLOCKS], epochs=1, client_extra=_args
        )
        bank, retail, telecom = clients
        assert telecom.wait(120) == 2, cluster.describe()
        log = telecom.log()
        assert f"{UNMATCHED} (" in log, log[-3000:]  # its own log says it, as an error
        assert "12345.0 is read as 12345" in log
        assert "error: " + UNMATCHED in log  # the command's one-line error, exit code 2
        assert coord.wait(120) == 0, cluster.describe()
        for client in (bank, retail):  # the others trained and were told the run ended
            assert client.wait(60) == 0, cluster.describe()
            assert UNMATCHED not in client.log()
        assert "block 2 (party2) matched no sample of another party" in coord.log()


@pytest.mark.slow
def test_given_a_label_party_that_shares_nothing_when_the_run_ends_then_it_exits_saying_why(
    tmp_path: Path,
) -> None:
    paths = write_tables(tmp_path / "tables", n=200)
    _lower_ids(paths["retail"])
    with Cluster(tmp_path / "cluster") as cluster:
        coord, (bank, retail) = cluster.federation(
            [paths["bank"], paths["retail"]],
            epochs=1,
            client_extra=lambda path: _args(path, blocks=2),
        )
        assert retail.wait(120) == 2, cluster.describe()  # let go when training starts
        assert coord.wait(120) == 0, cluster.describe()
        # the bank trained its own head on its own rows, and is told at the end why alone
        assert bank.wait(60) == 2, cluster.describe()
        assert "error: " + UNMATCHED in bank.log()
