"""What spreadsheets write around a table: a formatted empty
row saved as a line of separators (",,,,") is skipped as a blank line is; a "sep=;" first line
and a tab-separated ".txt" export are refused with the cure, not a wrong-width or format error."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from vfl_core.data.table_files import column_names, read_table
from vfl_core.data.tabular import TableSource, load_table_party
from vfl_core.errors import DataError

ROWS = [f"{i},{i % 7},{(i * 3) % 5},{'xyz'[i % 3]},{i % 2}" for i in range(200)]


def source(path: Path) -> TableSource:
    return TableSource(path=path, id_column="id", label_column="y", block=0, num_blocks=2)


def write(path: Path, rows: list[str], first: str = "id,a,b,c,y") -> Path:
    path.write_text("\n".join([first, *rows]) + "\n", encoding="utf-8")
    return path


def test_given_lines_of_separators_only_then_skipped_as_blank_lines(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clean, _ = load_table_party(source(write(tmp_path / "clean.csv", ROWS)))
    rows = [*ROWS[:50], ",,,,", *ROWS[50:], ",,,,", ",,,,"]
    with caplog.at_level(logging.WARNING):
        padded, _ = load_table_party(source(write(tmp_path / "padded.csv", rows)))
    assert "3 rows with no cell at all skipped, as blank lines are (line 52 to line 204)" in (
        caplog.text
    )
    for name, split in clean.splits.items():
        got = padded.splits[name]
        assert list(got.ids) == list(split.ids), name
        np.testing.assert_array_equal(got.features, split.features)
        np.testing.assert_array_equal(got.labels, split.labels)


def test_given_a_row_without_id_but_with_cells_then_still_refused_naming_its_line(
    tmp_path: Path,
) -> None:
    rows = [*ROWS[:5], ",3,4,x,1", *ROWS[5:], ",,,,"]
    with pytest.raises(DataError, match=r"line 7, column 'id': no ID"):
        load_table_party(source(write(tmp_path / "t.csv", rows)))


def test_given_a_separator_hint_line_then_refused_with_the_cure(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("sep=,\nid,a,b,c,y\n" + "\n".join(ROWS) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"line 1 is a spreadsheet's separator hint \('sep=,'\)"):
        load_table_party(source(path))


def test_given_a_txt_export_then_the_format_error_says_to_rename_it(tmp_path: Path) -> None:
    path = write(tmp_path / "t.txt", [r.replace(",", "\t") for r in ROWS], "id\ta\tb\tc\ty")
    with pytest.raises(DataError, match=r"unknown table format .* rename it"):
        load_table_party(source(path))


@pytest.mark.parametrize(
    ("name", "text", "encoding"),
    [
        ("plain.csv", "id,a,y\n1,2,3\n", "utf-8"),
        ("bom.csv", "id;a;y\n1;2;3\n", "utf-8-sig"),
        ("u16.csv", "id\ta\ty\n1\t2\t3\n", "utf-16"),
        ("latin.csv", "id,Région,y\n1,2,3\n", "cp1252"),
        ("quoted.tsv", 'id\t"a b"\ty\n1\t2\t3\n', "utf-8"),
    ],
)
def test_column_names_from_the_header_alone_are_the_read_tables(
    tmp_path: Path, name: str, text: str, encoding: str
) -> None:
    """vfl simulate finds its label parties by the header (column_names), not a whole read."""
    path = tmp_path / name
    path.write_bytes(text.encode(encoding))
    assert column_names(path) == read_table(path).names


def test_column_names_of_a_parquet_file_are_its_schemas(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": [1, 2], "label": ["a", "b"]}), path)
    assert column_names(path) == ["id", "label"] == read_table(path).names
