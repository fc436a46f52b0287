"""benchmarks.table_qa's spreadsheet exports that should read as the clean file does: the same
IDs, the same features (the stop-40 QA pass found these read right; this keeps them so)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from benchmarks.table_qa import BLOCKS, CASES, _read, _write, bank
from benchmarks.tabular_tables import write_parties
from vfl_core.data.tabular import TableSource, load_table_party


def features(path: Path, block: int) -> dict[str, np.ndarray]:
    source = TableSource(
        path=path, id_column="id", label_column="label" if block == 0 else None, block=block,
        num_blocks=3, num_classes=None if block == 0 else 2,
    )  # fmt: skip
    data, _ = load_table_party(source)
    # a label party's label-only rows (IDs past its features) have no features to compare
    split = data.splits.values()
    return {str(i): row for s in split for i, row in zip(s.ids, s.features, strict=False)}


@pytest.mark.parametrize(
    ("case", "blocks"),
    [
        ("thousands", (0, 1)),
        ("excel_crlf", (0, 1, 2)),
        ("excel_crlf_bom", (0, 1, 2)),
        ("semicolon", (0, 1)),  # block 2's score is rounded to 2 decimals there
        ("id_spaces", (1,)),
        ("booleans", (0,)),
    ],
)
def test_given_a_spreadsheet_export_then_it_reads_as_the_clean_file(
    tmp_path: Path, case: str, blocks: tuple[int, ...]
) -> None:
    write_parties(bank(0, n=200), 0, tmp_path / "clean", blocks=BLOCKS)
    for k in blocks:
        clean, messy = tmp_path / f"clean{k}.csv", tmp_path / f"{case}{k}.csv"
        _write(clean, *CASES["clean"](k, *_read(tmp_path / "clean", k)))
        _write(messy, *CASES[case](k, *_read(tmp_path / "clean", k)))
        want, got = features(clean, k), features(messy, k)
        assert sorted(got) == sorted(want)
        for i, row in want.items():
            np.testing.assert_allclose(got[i], row, rtol=1e-6, atol=1e-6)
