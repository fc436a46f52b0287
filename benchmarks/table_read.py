"""The cost of reading a party's own table (vfl_core.data.tabular): read + fit + transform of a
generated CSV against pyarrow's plain `pyarrow.csv.read_csv` of the same file.

    python -m benchmarks.table_read [--rows 200000] [--runs 3] [--compare /work/main]
        [--out FILE.md] [--profile N] [--parquet] [--dates N] [--libraries scikit-learn skrub]

The table (written to a temporary directory, deleted at the end): an ID column, a label, 13
numeric columns (one with missing cells), 4 categorical columns of a few values and 2 of a few
hundred (embedded): 21 columns. Every measurement runs in a fresh Python process (`--code DIR`
puts DIR first on its PYTHONPATH, so `--compare` measures another checkout with the same file);
reported: the median wall time of `--runs` runs (interleaved: one of each kind per run), the
peak resident memory above what the process held once its imports were done (Linux: the peak
VmHWM is reset through /proc/self/clear_refs after the imports; the largest run's), and the
median CPU time (user + system, every thread: the work done, which the load other processes
put on the machine moves less than the wall time). `--parquet` measures the same table written
as a Parquet file too (pyarrow's `pyarrow.parquet.read_table` as its plain read); its peak is
put beside the CSV file's size, the table's size as text. `--dates N` adds N columns of ISO
dates and times. `--libraries` measures the same job done by scikit-learn's ColumnTransformer or
skrub's TableVectorizer after pyarrow's plain read (`library_route`).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.pool import code_version

CITIES = ["Paris", "Lyon", "Nice", "Lille", "Nantes", "Brest"]
PLANS = ["basic", "plus", "premium"]

# Run in a fresh process: prints {"seconds": ..., "peak_mb": ...}. The imports come first and the
# peak is reset after them, so the peak above the resident set then is what the reading took.
_PROBE = """
import json, sys, time
from pathlib import Path
import pyarrow.csv
how, path = sys.argv[1], Path(sys.argv[2])
if how == "ours":
    from vfl_core.data import tabular
    from vfl_core.data.tabular import TableSource, load_table_party
    print("code:", tabular.__file__, file=sys.stderr)
elif how in ("scikit-learn", "skrub"):
    from benchmarks.table_read import library_route
    import sklearn.compose, sklearn.impute, sklearn.pipeline, sklearn.preprocessing  # noqa
    if how == "skrub":
        import skrub  # noqa
def status(key):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])  # kB
Path("/proc/self/clear_refs").write_text("5")  # reset the peak (VmHWM) to the resident set now
base = status("VmRSS")
start, cpu = time.perf_counter(), time.process_time()
if how == "pyarrow" and path.suffix == ".parquet":
    import pyarrow.parquet
    pyarrow.parquet.read_table(path)
elif how == "pyarrow":
    pyarrow.csv.read_csv(path)
elif how in ("scikit-learn", "skrub"):
    library_route(path, how)
else:
    source = TableSource(path=path, id_column="id", label_column="y", block=0, num_blocks=2)
    data, fitted = load_table_party(source)
seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
peak = status("VmHWM")
print(json.dumps({"seconds": seconds, "cpu": cpu, "peak_mb": (peak - base) / 1024}))
"""


def library_route(path: Path, how: str) -> None:
    """The same job done by the libraries the issue weighs (`--libraries`): pyarrow's plain
    read (its own typing: numbers where a column parses as numbers), the same test split
    (vfl_core.data.sample_ids, salted SHA-256 of the IDs), then scikit-learn's ColumnTransformer
    (mean imputation with a missing indicator and StandardScaler for numbers, OneHotEncoder
    for text columns of at most 16 training values, OrdinalEncoder for the others: the
    party's defaults) or skrub's TableVectorizer (its defaults) fitted on the training rows,
    and both splits transformed to float32 rows, the labels to class indices."""
    import pyarrow as pa
    import pyarrow.csv
    from sklearn.compose import ColumnTransformer
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, OrdinalEncoder, StandardScaler

    from vfl_core.data.sample_ids import held_out

    text = {"id": pa.string(), "y": pa.string()}
    table = pyarrow.csv.read_csv(
        path, convert_options=pyarrow.csv.ConvertOptions(column_types=text)
    )
    test = held_out(table.column("id"), 0.2)
    _, labels = np.unique(table.column("y").to_numpy(zero_copy_only=False), return_inverse=True)
    frame = table.drop_columns(["id", "y"]).to_pandas()
    del table
    train, held = frame[~test], frame[test]
    del frame
    if how == "skrub":
        from skrub import TableVectorizer

        model = TableVectorizer()
    else:
        numbers = [c for c in train if train[c].dtype.kind == "f"]
        words = [c for c in train if c not in numbers]
        few = [c for c in words if train[c].nunique() <= 16]
        many = [c for c in words if c not in few]
        model = ColumnTransformer(
            [
                (
                    "numbers",
                    make_pipeline(SimpleImputer(add_indicator=True), StandardScaler()),
                    numbers,
                ),
                ("onehot", OneHotEncoder(handle_unknown="ignore", sparse_output=False), few),
                (
                    "codes",
                    OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=-1),
                    many,
                ),
            ]
        )
    rows = np.asarray(model.fit_transform(train), dtype=np.float32)
    test_rows = np.asarray(model.transform(held), dtype=np.float32)
    assert len(rows) + len(test_rows) == len(labels)


def write_table(path: Path, rows: int, seed: int = 0, dates: int = 0) -> None:
    """The benchmark's CSV: 21 columns, some categorical, one numeric column with gaps; and
    `dates` columns of ISO dates and times (`--dates`) before the label."""
    gen = np.random.default_rng(seed)
    columns: dict[str, list[str]] = {"id": [f"c{i:08d}" for i in range(rows)]}
    for j in range(13):
        values = gen.normal(50 * j, 10 + j, rows).round(2).astype(str).tolist()
        if j == 0:
            values = [
                "" if gen_gap else v
                for v, gen_gap in zip(values, gen.random(rows) < 0.05, strict=True)
            ]
        columns[f"x{j}"] = values
    for j in range(4):
        names = CITIES if j % 2 == 0 else PLANS
        columns[f"cat{j}"] = [names[i] for i in gen.integers(0, len(names), rows)]
    for j in range(2):
        columns[f"shop{j}"] = [f"shop-{i}" for i in gen.integers(0, 300, rows)]
    start = np.datetime64("2015-01-01T00:00:00")
    for j in range(dates):  # a second each over ten years, written as spreadsheets write them
        when = start + gen.integers(0, 10 * 365 * 86400, rows).astype("timedelta64[s]")
        columns[f"when{j}"] = np.datetime_as_string(when).astype(object).tolist()
        columns[f"when{j}"] = [c.replace("T", " ") for c in columns[f"when{j}"]]
    columns["y"] = [("no", "yes")[i] for i in gen.integers(0, 2, rows)]
    with path.open("w") as f:
        f.write(",".join(columns) + "\n")
        for row in zip(*columns.values(), strict=True):
            f.write(",".join(row) + "\n")


def measure(how: str, path: Path, code: Path | None) -> dict[str, float]:
    # `python -c` puts its working directory first on sys.path: run it beside the table, with
    # the checkout to measure (this one by default) on PYTHONPATH
    env = {**os.environ, "PYTHONPATH": str(code or Path(__file__).resolve().parents[1])}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, how, str(path)],
        env=env,
        cwd=path.parent,
        capture_output=True,
        text=True,
        check=True,
    )
    root = env["PYTHONPATH"]
    used = [line.split(" ", 1)[1] for line in out.stderr.splitlines() if line.startswith("code:")]
    if used and not used[0].startswith(root):
        raise SystemExit(f"measured {used[0]}, not the checkout at {root}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def summary(
    what: list[tuple[str, str, Path | None, Path]], runs: int
) -> list[tuple[str, dict[str, float]]]:
    """Per (label, how, code, file): the median seconds and the largest peak of `runs` runs.
    The runs interleave (one of each, `runs` times), so a change in the machine's load between
    them touches every row alike."""
    results: dict[str, list[dict[str, float]]] = {label: [] for label, _, _, _ in what}
    for _ in range(runs):
        for label, how, code, path in what:
            results[label].append(measure(how, path, code))
    return [
        (
            label,
            {
                "seconds": statistics.median(r["seconds"] for r in results[label]),
                "cpu": statistics.median(r["cpu"] for r in results[label]),
                "peak_mb": max(r["peak_mb"] for r in results[label]),
            },
        )
        for label, _, _, _ in what
    ]


def profile(path: Path, code: Path | None, top: int) -> None:
    """cProfile of one read + fit + transform (after one unprofiled, so that imports and first
    calls are not in it), in a fresh process: the `top` functions of most own time."""
    script = (
        "import cProfile, pstats, sys\n"
        "from pathlib import Path\n"
        "from vfl_core.data.tabular import TableSource, load_table_party\n"
        "source = TableSource(path=Path(sys.argv[1]), id_column='id', label_column='y',"
        " block=0, num_blocks=2)\n"
        "load_table_party(source)\n"
        "profiler = cProfile.Profile()\n"
        "profiler.runcall(load_table_party, source)\n"
        "pstats.Stats(profiler).sort_stats('tottime').print_stats(int(sys.argv[2]))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(code or Path(__file__).resolve().parents[1])}
    out = subprocess.run(
        [sys.executable, "-c", script, str(path), str(top)],
        env=env,
        cwd=path.parent,
        capture_output=True,
        text=True,
        check=True,
    )
    print(out.stdout)


def _version(code: Path | None) -> str:
    """The commit of the checkout at `code` (this one where None)."""
    if code is None:
        return code_version()
    out = subprocess.run(
        ["git", "-C", str(code), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return out.stdout.strip() or str(code)


def _rows(
    args: argparse.Namespace, path: Path, plain: str, kind: str
) -> list[tuple[str, str, Path | None, Path]]:
    """The rows measured on one file: pyarrow's plain read, this checkout's, --compare's."""
    what = [
        (f"{plain} (plain read)", "pyarrow", args.code, path),
        (f"laser-vfl {_version(args.code)}: read + fit + transform{kind}", "ours", args.code, path),
    ]
    if args.compare is not None:
        label = f"laser-vfl {_version(args.compare)}: read + fit + transform{kind}"
        what.append((label, "ours", args.compare, path))
    for library in args.libraries if not kind else ():
        label = f"{library} (pyarrow read, same split): fit + transform"
        what.append((label, library, args.code, path))
    return what


def _write_parquet(csv_path: Path, path: Path) -> None:
    """The CSV's table as Parquet, as pyarrow types it (text IDs, labels and categories)."""
    import pyarrow.csv
    import pyarrow.parquet

    types = {"id": "string", "y": "string"}
    options = pyarrow.csv.ConvertOptions(column_types=types)
    pyarrow.parquet.write_table(pyarrow.csv.read_csv(csv_path, convert_options=options), path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--code", type=Path, default=None, help="checkout to measure (PYTHONPATH)")
    parser.add_argument("--compare", type=Path, default=None, help="another checkout, measured too")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="also print the N functions of most own time of one read + fit + transform",
    )
    parser.add_argument(
        "--parquet", action="store_true", help="also the same table as a Parquet file"
    )
    parser.add_argument(
        "--dates", type=int, default=0, help="also this many columns of ISO dates and times"
    )
    parser.add_argument(
        "--libraries",
        nargs="*",
        choices=("scikit-learn", "skrub"),
        default=[],
        help="also the same job by these libraries (skrub must be installed)",
    )
    args = parser.parse_args(argv)
    for library in args.libraries:  # measured, never a dependency of laser-vfl
        if importlib.util.find_spec({"scikit-learn": "sklearn"}.get(library, library)) is None:
            parser.error(f"--libraries {library}: not installed (pip install {library})")
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "table.csv"
        write_table(path, args.rows, dates=args.dates)
        size_mb = path.stat().st_size / 2**20
        if args.profile:
            profile(path, args.code, args.profile)
        what = _rows(args, path, "pyarrow.csv.read_csv", "")
        kept = ""
        if args.parquet:
            parquet = path.with_suffix(".parquet")
            _write_parquet(path, parquet)
            what += _rows(args, parquet, "pyarrow.parquet.read_table", " (Parquet)")
            kept = (
                f" (as Parquet {parquet.stat().st_size / 2**20:.1f} MB; every row's x file "
                "size is against the CSV's)"
            )
        rows = summary(what, args.runs)
        plain = rows[0][1]
        plain_of = {label: plain for label, _ in rows}
        if args.parquet:
            first = len(rows) // 2  # the Parquet rows, each against pyarrow's Parquet read
            plain_of.update({label: rows[first][1] for label, _ in rows[first:]})
    lines = [
        f"{args.rows} rows x {21 + args.dates} columns, {size_mb:.1f} MB CSV{kept}; median of "
        f"{args.runs} runs, "
        f"each in a fresh process; {os.cpu_count()} CPUs, load average (1 min) "
        f"{load_before:.1f} before and {os.getloadavg()[0]:.1f} after",
        "",
        "| what | seconds | x pyarrow | peak MB above imports | x file size | CPU seconds "
        "| CPU x pyarrow |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for what, r in rows:
        plain = plain_of[what]
        lines.append(
            f"| {what} | {r['seconds']:.2f} | {r['seconds'] / plain['seconds']:.1f} | "
            f"{r['peak_mb']:.0f} | {r['peak_mb'] / size_mb:.1f} | {r['cpu']:.2f} | "
            f"{r['cpu'] / plain['cpu']:.1f} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
