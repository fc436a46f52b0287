"""`vfl bench`: the grid's runs, caching and resumption, the aggregation and the reports, on tiny
settings (digits, one epoch) and crafted records. No timing is asserted."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from benchmarks import paper as grid
from benchmarks import pool
from benchmarks import scale as scaling
from benchmarks.paper import AccuracyJob, run_grid, write_report
from benchmarks.setups import COLUMNS, SETUPS, AccuracyContext, accuracy_markdown, checks
from vfl_cli.app import app

DIGITS = SETUPS["digits"]
HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None  # the optional `bench` extra


def _job(results: Path, **kw: Any) -> AccuracyJob:
    args: dict[str, Any] = {
        "dataset": "digits",
        "methods": ("laser", "svfl"),
        "seeds": (0,),
        "p_train": (0.0,),
        "p_test": (0.0, 0.5),
        "results": results,
        "jobs": 0,
        "command": "vfl bench paper accuracy --dataset digits",
    }
    return AccuracyJob(**{**args, **kw})


# ------------------------------------------------------------------------ runs and cache


def test_given_a_grid_when_listed_then_runs_are_seed_major_and_files_carry_the_setup() -> None:
    runs = grid.grid_runs(["laser", "svfl"], [0.0, 0.5], [0, 1])
    assert [r.seed for r in runs] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert runs[:2] == [grid.Run("laser", 0.0, 0), grid.Run("svfl", 0.0, 0)]
    tasks = grid.grid_tasks(DIGITS, runs, Path("/r"))
    digests = {t.payload["digest"] for t in tasks}
    assert len(digests) == 1  # method, p_train and seed are not part of the setup
    assert tasks[0].out == Path(f"/r/digits/laser-ptrain0-seed0-{digests.pop()}.json")
    assert tasks[0].payload["config"]["train"]["method"] == "laser"
    assert tasks[2].payload["config"]["p_miss_train"] == 0.5
    longer = grid.grid_tasks(DIGITS, runs[:1], Path("/r"), epochs=7)
    assert longer[0].payload["digest"] != tasks[0].payload["digest"]  # other setup, other files


def test_given_cached_runs_when_the_grid_runs_again_then_only_missing_runs_are_run(
    tmp_path: Path,
) -> None:
    calls: list[str] = []

    def worker(payload: dict[str, Any]) -> dict[str, Any]:
        calls.append(payload["name"])
        if payload["name"] == "bad":
            raise RuntimeError("boom")
        return {"value": payload["name"]}

    tasks = [pool.Task(n, {"name": n}, tmp_path / f"{n}.json") for n in ("a", "b", "bad")]
    (tmp_path / "b.json").write_text("{}")  # already done
    (tmp_path / ".a.json.123.tmp").write_text("{")  # a torn write of an interrupted run
    failed = pool.run_tasks(worker, tasks, jobs=0, progress=False)
    assert calls == ["a", "bad"] and failed == ["bad"]
    record = json.loads((tmp_path / "a.json").read_text())
    assert record["value"] == "a" and record["payload"] == {"name": "a"}
    assert record["machine"]["cores"] >= 1 and record["torch_threads"] == 1
    assert not (tmp_path / "bad.json").exists()
    calls.clear()
    assert pool.run_tasks(worker, tasks[:2], jobs=0, progress=False) == []
    assert calls == []


def test_given_digits_when_the_grid_runs_then_each_run_is_cached_with_its_config(
    tmp_path: Path,
) -> None:
    job = _job(tmp_path)
    assert run_grid(job, progress=False) == []
    files = sorted((tmp_path / "runs" / "digits").glob("*.json"))
    assert [f.name.split("-seed")[0] for f in files] == ["laser-ptrain0", "svfl-ptrain0"]
    record = json.loads(files[0].read_text())
    assert record["config"]["train"]["epochs"] == 1
    assert record["config"]["p_miss_test"] == [0.0, 0.5]
    assert [r["p_miss_test"] for r in record["results"]] == [0.0, 0.5]
    assert record["run"] == {"method": "laser", "p_train": 0.0, "seed": 0}
    mtimes = [f.stat().st_mtime_ns for f in files]
    assert run_grid(job, progress=False) == []  # resumed: nothing to do
    assert [f.stat().st_mtime_ns for f in files] == mtimes

    path, text = write_report(job)
    assert path == tmp_path / "accuracy_digits.md" and path.read_text() == text
    if HAS_MATPLOTLIB:
        assert (tmp_path / "accuracy_digits.png").stat().st_size > 0
        assert "![digits grid](accuracy_digits.png)" in text
    assert "| LASER-VFL |" in text and "| Standard VFL |" in text
    assert "(1) |" in text and job.command in text and "no GPU" in text
    assert "not in our files" in text  # no paper numbers for this data set


def test_given_a_run_from_before_a_field_existed_when_loaded_then_it_matches_only_its_setup(
    tmp_path: Path,
) -> None:
    """Runs cached before TrainConfig had `staleness` lack it: they stay the reference setup's
    and match no setup that sets it (the staleness report once died on a KeyError there)."""
    import dataclasses

    run = grid.grid_runs(["laser"], [0.0], [0])[0]
    config = json.loads(grid.simulation_config(DIGITS, run).model_dump_json())
    del config["train"]["staleness"]
    (tmp_path / "digits").mkdir()
    record = {"config": config, "run": {"method": "laser", "p_train": 0.0, "seed": 0}}
    (tmp_path / "digits" / "old.json").write_text(json.dumps(record))
    assert len(grid.load_runs(tmp_path, DIGITS, grid.setup_digest(DIGITS, config))) == 1
    stale = dataclasses.replace(DIGITS, train={**DIGITS.train, "staleness": 3})
    probe = {**config, "train": {**config["train"], "staleness": 3}}
    assert grid.load_runs(tmp_path, stale, grid.setup_digest(stale, probe)) == []


# ------------------------------------------------------------------------ aggregation


def _record(method: str, p_train: float, seed: int, values: dict[float, float]) -> dict:
    return {
        "run": {"method": method, "p_train": p_train, "seed": seed},
        "results": [
            {"p_miss_test": p, "rows": [{"observed": "all", "f1": v / 100, "accuracy": v / 200}]}
            for p, v in values.items()
        ],
    }


def test_given_runs_when_summarized_then_mean_sample_std_and_seed_count_per_cell() -> None:
    records = [
        _record("laser", 0.0, 0, {0.0: 40.0, 0.5: 30.0}),
        _record("laser", 0.0, 1, {0.0: 44.0, 0.5: 30.0}),
        _record("svfl", 0.0, 0, {0.0: 41.0}),
    ]
    stats = grid.summarize(grid.collect(records, "f1", (0.0, 0.5)))
    assert stats[("laser", 0.0, 0.0)] == grid.Stat(42.0, pytest.approx(np.sqrt(8.0)), 2)
    assert stats[("laser", 0.0, 0.5)].std == 0.0
    assert stats[("svfl", 0.0, 0.0)] == grid.Stat(41.0, 0.0, 1)
    assert ("svfl", 0.0, 0.5) not in stats
    accuracy = grid.summarize(grid.collect(records, "accuracy", (0.0,)))
    assert accuracy[("laser", 0.0, 0.0)].mean == pytest.approx(21.0)


def test_given_credit_cells_when_reported_then_paper_numbers_gaps_and_checks_show() -> None:
    setup = SETUPS["credit"]
    methods = ("svfl", "laser")
    stats = {
        ("laser", 0.0, 0.0): grid.Stat(46.0, 0.5, 3),
        ("svfl", 0.0, 0.0): grid.Stat(45.0, 1.0, 3),
        ("svfl", 0.0, 0.5): grid.Stat(31.0, 0.4, 2),
        ("laser", 0.0, 0.5): grid.Stat(43.0, 0.3, 2),
    }
    ctx = AccuracyContext(
        "vfl bench paper accuracy", {"cores": 2, "gpu": False}, methods, (0, 1, 2)
    )
    text = accuracy_markdown(stats, setup, ctx, "accuracy_credit.png")
    assert "| Standard VFL | 45.0 ± 1.0 (3) | — |" in text
    assert "| LASER-VFL | 46.5 | 45.0 | 43.7 |" in text  # the paper's row
    assert "| LASER-VFL | -0.5 | — | -0.7 |" in text  # ours minus the paper's
    assert "0/0: LASER-VFL 46.00 vs best other Standard VFL 45.00" in text
    assert "Standard VFL at 0/0.5: 31.0" in text
    assert "Standard VFL train 0.1: 0/3 seeds" in text  # missing runs listed
    assert "![credit grid](accuracy_credit.png)" in text
    assert len(COLUMNS) == 9 and all(len(v) == 9 for v in setup.paper.values())


def test_given_laser_just_below_the_best_when_checked_then_the_best_methods_std_decides() -> None:
    """Within one std of the best: 88.6 passes against 88.8 +- 0.22 though its own std is 0.16,
    and fails against 88.8 +- 0.1 however wide its own spread."""
    ctx = AccuracyContext("vfl bench", {}, ("plug", "laser"), (0, 1, 2), (0.1,), (0.5,))

    def check(laser: grid.Stat, plug: grid.Stat) -> str:
        stats = {("laser", 0.1, 0.5): laser, ("plug", 0.1, 0.5): plug}
        return checks(stats, SETUPS["mnist"], ctx)[0]

    line = check(grid.Stat(88.6, 0.16, 3), grid.Stat(88.8, 0.22, 3))
    assert line.endswith(": ok") and "gap -0.20" in line and "margin +0.02" in line, line
    line = check(grid.Stat(88.6, 0.9, 3), grid.Stat(88.8, 0.1, 3))
    assert "margin -0.10" in line and "more than its std" in line, line


# ------------------------------------------------------------------------ CLI


def test_given_the_cli_when_bench_accuracy_runs_then_it_writes_the_report(tmp_path: Path) -> None:
    args = ["bench", "paper", "accuracy", "--dataset", "digits", "--seeds", "0", "--methods"]
    args += ["local", "--p-train", "0", "--p-test", "0", "--jobs", "0", "--results", str(tmp_path)]
    result = CliRunner().invoke(app, [*args, "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "| Local |" in result.output
    assert (tmp_path / "accuracy_digits.md").exists()
    again = CliRunner().invoke(app, [*args, "--report-only"])
    assert again.exit_code == 0, again.output


def test_given_bad_options_when_bench_accuracy_runs_then_one_error_line() -> None:
    result = CliRunner().invoke(app, ["bench", "paper", "accuracy", "--methods", "laser,magic"])
    assert result.exit_code == 2 and "unknown method" in result.output
    result = CliRunner().invoke(app, ["bench", "paper", "accuracy", "--dataset", "cifar"])
    assert result.exit_code == 2 and "unknown dataset" in result.output


def test_given_a_name_from_before_the_suites_when_run_then_the_suites_command_runs() -> None:
    result = CliRunner().invoke(app, ["bench", "accuracy", "--dataset", "cifar"])
    assert result.exit_code == 2 and "unknown dataset 'cifar'" in result.output
    assert "warning: vfl bench accuracy is now vfl bench paper accuracy" in result.output
    result = CliRunner().invoke(app, ["bench", "scaling", "--model", "rnn"])
    assert result.exit_code == 2 and "--representation must be one of" in result.output
    assert "--model is deprecated, use --representation" in result.output


# ------------------------------------------------------------------------ scaling, throughput


def test_given_scaling_records_when_reported_then_tables_growth_and_fit(tmp_path: Path) -> None:
    job = scaling.ScalingJob(
        ks=(2, 3, 4), methods=("laser", "combinatorial"), results=tmp_path, data_path=tmp_path
    )
    tasks = {t.label: t for t in job.tasks()}
    assert set(tasks) == {f"{m} K={k}" for m in job.methods for k in job.ks}
    for k in job.ks:
        for method, seconds in (("laser", float(k)), ("combinatorial", 2.0 ** (k - 1))):
            record = {
                "method": method,
                "K": k,
                "seconds_per_epoch": seconds,
                "rounds_per_epoch": 100 * (k - 1),  # more observed sets, more partial batches
                "accuracy": 0.5,
                "predictors": 2**k - 1 if method == "combinatorial" else k,
                "machine": {"cores": 2, "gpu": False},
            }
            pool.write_json(tasks[f"{method} K={k}"].out, record)
    path, text = scaling.write_report(job)
    assert path.exists()
    assert (tmp_path / "scaling.png").exists() == HAS_MATPLOTLIB
    assert "| 4 | 4.0 | 8.0 |" in text  # time per epoch
    assert "| 4 | x1.33 | x2.00 |" in text  # growth from K=3
    assert "| 4 | 4 | 15 |" in text  # predictors
    assert "Combinatorial, per epoch: x2.00 per extra party" in text
    assert "| 4 | 300 | 13.3 | 26.7 |" in text  # rounds per epoch, ms per round
    # LASER-VFL: 2 s over 100 rounds at K=2 (20 ms), 4 s over 300 rounds at K=4 (13.3 ms)
    assert "LASER-VFL, per round:" in text and "x0.67 from K=2 to K=4 while K grows x2.00" in text
    assert "did not record the machine's load" in text  # these records carry no load average


def test_given_scaling_records_with_loads_when_reported_then_the_load_range_is_stated(
    tmp_path: Path,
) -> None:
    job = scaling.ScalingJob(ks=(2, 3), methods=("laser",), results=tmp_path, data_path=tmp_path)
    for task, load in zip(job.tasks(), (1.25, 0.5), strict=True):
        record = {
            "method": "laser",
            "K": task.payload["clients"],
            "seconds_per_epoch": 1.0,
            "accuracy": 0.5,
            "predictors": 2,
            "machine": {"cores": 2, "gpu": False},
            "load_average": [load, 1.0, 1.0],
            "code": "abc1234",
        }
        pool.write_json(task.out, record)
    _, text = scaling.write_report(job)
    assert "1-minute load average at the end of each run 0.50 to 1.25" in text
    assert "code abc1234." in text
    assert "niced" not in text


def test_given_messages_when_audited_then_training_bytes_are_counted(tmp_path: Path) -> None:
    from vfl_wire.audit import AuditLog
    from vfl_wire.tensors import encode_array
    from vfl_wire.v1 import vfl_pb2

    emb = encode_array(np.zeros((4, scaling.EMBED_DIM), np.float32))
    messages = [
        ("Embed", "request", vfl_pb2.EmbedRequest(train=True)),
        ("Embed", "response", vfl_pb2.EmbedReply(embedding=emb)),
        ("Fuse", "request", vfl_pb2.FuseRequest(embeddings={1: emb, 2: emb})),
        ("Fuse", "response", vfl_pb2.FuseReply(grads={1: emb})),
        ("Backward", "request", vfl_pb2.BackwardRequest(grad=emb)),
        ("Embed", "request", vfl_pb2.EmbedRequest(train=False)),  # evaluation: not counted
        ("Embed", "response", vfl_pb2.EmbedReply(embedding=emb)),
    ]
    path = tmp_path / "a.audit"
    with AuditLog(path) as audit:
        for rpc, direction, msg in messages:
            audit.write(f"/vfl.v1.Party/{rpc}", direction, "client", msg.SerializeToString())
    counted = scaling.audited_bytes(path)
    assert counted["calls"] == 3
    assert counted["tensor_bytes"] == 5 * len(emb.data)
    assert counted["bytes"] == sum(m.ByteSize() for _, _, m in messages[:5])
    minimum = scaling.minimum_bytes(samples=10)
    unit = 10 * scaling.EMBED_DIM * 4
    assert minimum == {"direct": 24 * unit, "relay": 32 * unit}


def test_given_pipelined_train_calls_when_audited_then_nested_tensors_and_scales_count(
    tmp_path: Path,
) -> None:
    from vfl_wire.audit import AuditLog
    from vfl_wire.tensors import encode_array, encode_float
    from vfl_wire.v1 import vfl_pb2

    emb = encode_array(np.zeros((4, scaling.EMBED_DIM), np.float32))
    small = encode_float(np.ones((4, scaling.EMBED_DIM), np.float32), "int8")
    messages = [
        ("Train", "request", vfl_pb2.TrainRequest(embed=[vfl_pb2.EmbedRequest(train=True)])),
        ("Train", "response", vfl_pb2.TrainReply(embeddings=[vfl_pb2.EmbedReply(embedding=emb)])),
        (
            "Train",
            "request",
            vfl_pb2.TrainRequest(fuse=[vfl_pb2.FuseRequest(embeddings={1: small})]),
        ),
        ("Train", "response", vfl_pb2.TrainReply(fused=[vfl_pb2.FuseReply(grads={1: small})])),
        ("Embed", "request", vfl_pb2.EmbedRequest(train=False)),  # evaluation: not counted
        ("Embed", "response", vfl_pb2.EmbedReply(embedding=emb)),
    ]
    path = tmp_path / "a.audit"
    with AuditLog(path) as audit:
        for rpc, direction, msg in messages:
            audit.write(f"/vfl.v1.Party/{rpc}", direction, "client", msg.SerializeToString())
    counted = scaling.audited_bytes(path)
    assert counted["calls"] == 2
    assert counted["tensor_bytes"] == len(emb.data) + 2 * (len(small.data) + len(small.scales))
    assert counted["bytes"] == sum(m.ByteSize() for _, _, m in messages[:4])


def test_given_a_report_with_notes_when_rewritten_then_the_notes_stay(tmp_path: Path) -> None:
    record = {
        "machine": {"cores": 2, "torch": "x"},
        "job": {"train_samples": 10, "warmup": 1, "repeats": 1, "seed": 0},
        "command": "vfl bench scale throughput",
        "finished": "now",
        "seconds": 60,
        "load_average": [1.0, 2.0],
        "rows": [],
    }
    path, _ = scaling.write_throughput_report(record, tmp_path)
    path.write_text(path.read_text() + "\n" + scaling.NOTES + "\n\nprofiled by hand\n")
    _, text = scaling.write_throughput_report(record, tmp_path)
    assert text.count(scaling.NOTES) == 1 and text.endswith("profiled by hand\n")


def test_given_a_wire_dtype_report_with_notes_when_rewritten_then_the_notes_stay(
    tmp_path: Path,
) -> None:
    from benchmarks import wire_dtype

    job = wire_dtype.WireDtypeJob(tmp_path, tmp_path, ("credit",), ("float32", "int8"))
    path, _ = wire_dtype.write_report(job)
    path.write_text(path.read_text() + "\n" + wire_dtype.NOTES + "\n\nread by hand\n")
    _, text = wire_dtype.write_report(job)
    assert text.count(wire_dtype.NOTES) == 1 and text.endswith("read by hand\n")


def test_given_a_staleness_when_throughput_configures_a_run_then_both_transports_get_it() -> None:
    """`vfl bench scale throughput --staleness 0,3`: the in-process run's TrainConfig and the real
    federation's coordinator options carry the same staleness (0 given for the exact engine)."""
    from benchmarks import procs
    from vfl_core.config import TrainConfig

    job = scaling.ThroughputJob(results=Path("."), data_path=Path("."), staleness=(0, 3))
    exact, stale = (job.train_config("mlp", 128, 2, s) for s in job.staleness)
    assert TrainConfig.model_validate(exact).staleness == 0
    assert TrainConfig.model_validate(stale).staleness == 3
    args = procs.train_args(stale)
    assert args[args.index("--staleness") + 1] == "3"
    exact_args = procs.train_args(exact)
    assert exact_args[exact_args.index("--staleness") + 1] == "0"
