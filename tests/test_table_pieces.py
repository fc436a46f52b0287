"""A CSV table read in pieces while a second thread hashes its IDs for the test split (issue 27
item 5: vfl_core.data.csv_pieces, vfl_core.data.id_hashing). Each case must give what the file
read whole gives: the same split by the same hashes of the IDs as the table ends up writing
them, the same rows, the same errors naming the same lines."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from vfl_core.data import csv_pieces
from vfl_core.data.columns import dictionary_codes
from vfl_core.data.id_hashing import SplitKeysWhileReading
from vfl_core.data.piece_codes import PieceCodes
from vfl_core.data.sample_ids import held_out, split_keys
from vfl_core.data.tabular import TableSource, load_table_party
from vfl_core.errors import DataError

ROWS = 400


@pytest.fixture
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files of a few KB read in 16 pieces (a large file's are 8 of 1 MB or more)."""
    monkeypatch.setattr(csv_pieces, "PIECES", 16)
    monkeypatch.setattr(csv_pieces, "MIN_PIECE_BYTES", 64)


def source(path: Path, **kw: object) -> TableSource:
    base = {"id_column": "id", "label_column": "y", "block": 0, "num_blocks": 2}
    return TableSource(path=path, **{**base, "test_fraction": 0.3, **kw})  # type: ignore[arg-type]


def write(path: Path, ids: list[str], extra: dict[int, str] | None = None) -> Path:
    """A CSV of `ids` with a number, a category and a label per row; `extra`: line number ->
    that line's text instead (line 2 is the first row)."""
    lines = ["id,amount,city,y"]
    for i, sample_id in enumerate(ids):
        lines.append(f"{sample_id},{i * 0.5:.1f},{['Paris', 'Lyon'][i % 2]},{i % 3 % 2}")
    for line, text in (extra or {}).items():
        lines[line - 1] = text
    path.write_text("\n".join(lines) + "\n")
    return path


def assert_split(party_ids: dict[str, np.ndarray], ids: list[str]) -> None:
    """The test split holds exactly the IDs whose hash (of the IDs as given) says so."""
    test = held_out(pa.chunked_array([pa.array(ids)]), 0.3)
    assert sorted(party_ids["test"].tolist()) == sorted(np.array(ids)[test].tolist())
    assert sorted(party_ids["train"].tolist()) == sorted(np.array(ids)[~test].tolist())


def loaded(path: Path) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], str]:
    party, fitted = load_table_party(source(path))
    ids = {name: split.ids for name, split in party.splits.items()}
    features = {name: split.features for name, split in party.splits.items()}
    return ids, features, fitted.to_json()


@pytest.mark.usefixtures("small_pieces")
def test_given_a_table_in_pieces_when_loaded_then_split_and_rows_as_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = [f"{i}.0" if i % 5 == 0 else f"c{i}" for i in range(ROWS)]  # zero fractions dropped
    path = write(tmp_path / "t.csv", ids)
    in_pieces = loaded(path)
    monkeypatch.setattr(csv_pieces, "PIECES", 1)
    whole = loaded(path)
    written = [i.removesuffix(".0") for i in ids]
    assert_split(in_pieces[0], written)
    for name in ("train", "test"):
        assert in_pieces[0][name].tolist() == whole[0][name].tolist()
        np.testing.assert_array_equal(in_pieces[1][name], whole[1][name])
    assert in_pieces[2] == whole[2]


@pytest.mark.parametrize("pieces", [3, 7])
def test_given_an_odd_count_of_pieces_when_loaded_then_as_read_whole_and_no_thread_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pieces: int
) -> None:
    """Pieces are parsed two at a time: a last piece without a pair is parsed too, the pieces
    are handed on in the file's order, and the second parsing thread ends with the read."""
    monkeypatch.setattr(csv_pieces, "MIN_PIECE_BYTES", 64)
    path = write(tmp_path / "t.csv", [f"c{i}" for i in range(ROWS)])
    monkeypatch.setattr(csv_pieces, "PIECES", pieces)
    in_pieces = loaded(path)
    assert not [t for t in threading.enumerate() if t.name.startswith("vfl-csv-piece")]
    monkeypatch.setattr(csv_pieces, "PIECES", 1)
    whole = loaded(path)
    for name in ("train", "test"):
        assert in_pieces[0][name].tolist() == whole[0][name].tolist()
        np.testing.assert_array_equal(in_pieces[1][name], whole[1][name])
    assert in_pieces[2] == whole[2]


@pytest.mark.usefixtures("small_pieces")
def test_given_ids_cleaned_after_the_read_when_loaded_then_split_by_the_cleaned_ids(
    tmp_path: Path,
) -> None:
    ids = [f" c{i}" if i % 7 == 0 else f"c{i}" for i in range(ROWS)]  # spaces trimmed
    party_ids, _, _ = loaded(write(tmp_path / "t.csv", ids))
    assert_split(party_ids, [i.strip() for i in ids])


@pytest.mark.usefixtures("small_pieces")
def test_given_quoted_cells_when_loaded_then_read_whole_and_split_alike(tmp_path: Path) -> None:
    ids = [f'"c{i}"' if i % 3 == 0 else f"c{i}" for i in range(ROWS)]
    party_ids, _, _ = loaded(write(tmp_path / "t.csv", ids))
    assert_split(party_ids, [i.strip('"') for i in ids])


@pytest.mark.usefixtures("small_pieces")
def test_given_a_late_text_cell_in_a_number_column_when_loaded_then_read_again_and_named(
    tmp_path: Path,
) -> None:
    # the first lines' numbers are parsed as read; a later piece's text has the file read again
    # as text, and the fit names the stray cell
    path = write(tmp_path / "t.csv", [f"c{i}" for i in range(ROWS)], {ROWS: "c398,many,Paris,1"})
    with pytest.raises(DataError, match=r"'amount' holds numbers but .*'many' at line 400"):
        load_table_party(source(path))


@pytest.mark.usefixtures("small_pieces")
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("c1,2.0,Paris", r"line 390 has 3 fields, the header has 4"),
        (",2.0,Paris,1", r"line 390, column 'id': no ID"),
    ],
)
def test_given_a_bad_row_in_a_late_piece_when_loaded_then_its_line_is_named(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = write(tmp_path / "t.csv", [f"c{i}" for i in range(ROWS)], {390: text})
    with pytest.raises(DataError, match=expected):
        load_table_party(source(path))


def test_given_chunks_of_other_ids_when_keys_asked_then_hashed_again() -> None:
    ids = pa.chunked_array([pa.array([f"c{i}" for i in range(50)])])
    with SplitKeysWhileReading("id") as hashing:
        hashing(pa.chunked_array([pa.array(["x", "y"])]))
        hashing.restart()
        hashing(ids)
        assert hashing.keys(ids).tolist() == split_keys(ids).tolist()
    other = pa.chunked_array([pa.array([f"d{i}" for i in range(50)])])
    with SplitKeysWhileReading("id") as hashing:
        hashing(ids)
        assert hashing.keys(other).tolist() == split_keys(other).tolist()
    with SplitKeysWhileReading("id") as hashing:  # nothing given (a Parquet file)
        assert hashing.keys(ids).tolist() == split_keys(ids).tolist()


@pytest.mark.usefixtures("small_pieces")
def test_given_a_windows_1252_id_in_a_late_piece_when_loaded_then_read_again_and_split_alike(
    tmp_path: Path,
) -> None:
    ids = [f"c{i}" if i != 350 else "café" for i in range(ROWS)]
    path = write(tmp_path / "t.csv", ids)
    path.write_bytes(path.read_text().encode("cp1252"))  # not UTF-8 from line 352 on
    party_ids, _, _ = loaded(path)
    assert_split(party_ids, ids)


def test_given_a_column_encoded_piece_by_piece_when_unified_then_codes_as_encoded_whole() -> None:
    column = pa.chunked_array(
        [pa.array(["b", None, "a"]), pa.array(["c", "a"]), pa.array(["d", "b"])]
    )
    pieces = [pa.chunked_array(column.chunks[:2]), pa.chunked_array(column.chunks[2:])]
    encoded = pa.chunked_array([c for p in pieces for c in pc.dictionary_encode(p).chunks])
    codes, values = dictionary_codes(column, encoded)
    whole_codes, whole_values = dictionary_codes(column)
    assert codes.tolist() == whole_codes.tolist() == [0, -1, 1, 2, 1, 3, 0]
    assert values.equals(whole_values)


class _Watch:
    """A ColumnWatch that runs its jobs at once, on the caller's thread."""

    column = "id"

    def __init__(self) -> None:
        self.given: list[list[str]] = []

    def restart(self) -> None:
        self.given.clear()

    def __call__(self, cells: pa.ChunkedArray) -> None:
        self.given.append(cells.to_pylist())

    def then(self, job: Callable[[], None]) -> None:
        job()


def _piece(ids: list[str], cities: list[str | None]) -> pa.Table:
    return pa.table({"c0": pa.array(ids), "c1": pa.array(cities, pa.string())})


def test_given_pieces_watched_when_codes_taken_then_only_the_last_reads_pieces_encoded() -> None:
    watch = _Watch()
    codes = PieceCodes(0, watch, [1])
    codes.restart()
    codes(_piece(["x"], ["Nice"]))  # a read given up: the file read again from its start
    codes.restart()
    codes(_piece(["a", "b"], ["Lyon", None]))
    codes(_piece(["c"], ["Paris"]))
    assert watch.given == [["a", "b"], ["c"]]
    encoded = codes.take(1, 3)
    assert encoded is not None
    cities = pa.chunked_array([pa.array(["Lyon", None]), pa.array(["Paris"])])
    assert dictionary_codes(cities, encoded)[0].tolist() == [0, -1, 1]
    assert codes.take(1, 3) is None  # given once
    other = PieceCodes(0, _Watch(), [1])
    other(_piece(["a", "b"], ["Lyon", None]))
    assert other.take(1, 5) is None  # not the rows the table ends up with
    whole = PieceCodes(0, _Watch(), [1])
    whole(_piece(["a", "b"], ["Lyon", None]), whole=True)  # read whole: encoded by the caller
    assert whole.take(1, 2) is None


def test_given_jobs_for_the_hashing_thread_when_ids_given_then_run_after_them_in_order() -> None:
    ids = pa.chunked_array([pa.array([f"c{i}" for i in range(50)])])
    ran: list[tuple[int, str]] = []
    done = threading.Event()
    with SplitKeysWhileReading("id") as hashing:
        hashing(ids)
        hashing.then(lambda: ran.append((1, threading.current_thread().name)))
        hashing.then(lambda: ran.append((2, threading.current_thread().name)))
        hashing.then(done.set)
        assert done.wait(timeout=30)
        assert ran == [(1, "id-hashing"), (2, "id-hashing")]
        assert hashing.keys(ids).tolist() == split_keys(ids).tolist()
