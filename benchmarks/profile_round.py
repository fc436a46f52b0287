"""Where the CPU of a loopback gRPC training round goes, per process and thread.

    python -m benchmarks.profile_round --data-path ../shared/data [--epochs 8] [--gil-seconds 10]

Runs `vfl bench throughput`'s MLP workload (K = 4 MNIST quadrants, 196 -> 128 -> 32, batch 128)
as a real federation on 127.0.0.1 and reads every thread's CPU time (user + system, from
/proc/<pid>/task/<tid>/stat) at the end of the first and of the last epoch: CPU milliseconds per
round by process and thread, exact and independent of the machine's other load (unlike wall
time). Thread names come from `py-spy dump` (`pip install py-spy`; needs ptrace rights), which
also samples, with --gil-seconds, the Python code that holds the GIL in the coordinator and
client 0 (the Python share of their CPU), printed as the functions with most samples.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path

from benchmarks import procs, throughput

PY_SPY = Path(sys.executable).parent / "py-spy"


def thread_cpu(pid: int) -> dict[int, float]:
    """tid -> CPU seconds so far, for every thread of `pid` ({} once it is gone)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(task.name)] = (int(fields[11]) + int(fields[12])) / tick
    return out


def thread_names(pid: int) -> dict[int, str]:
    """tid -> Python thread name, from py-spy dump ({} without py-spy)."""
    if not PY_SPY.exists():
        return {}
    dump = subprocess.run(
        [str(PY_SPY), "dump", "--pid", str(pid), "--json"], capture_output=True, text=True
    )
    try:
        threads = json.loads(dump.stdout)
    except json.JSONDecodeError:
        return {}
    return {
        t["os_thread_id"]: t.get("thread_name") or "?" for t in threads if t.get("os_thread_id")
    }


def gil_profile(pid: int, seconds: float, out: Path) -> Counter[str]:
    """Samples of the thread holding the GIL: function (file) -> samples, innermost frames of
    our code and of grpc/protobuf/torch/numpy."""
    argv = [str(PY_SPY), "record", "--pid", str(pid), "--duration", str(int(seconds)), "--gil"]
    argv += ["--rate", "200", "--format", "raw", "--output", str(out)]
    subprocess.run(argv, capture_output=True)
    counts: Counter[str] = Counter()
    if not out.exists():
        return counts
    for line in out.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        frames = stack.split(";")[1:]
        seen = set()
        for frame in frames:
            name = re.sub(r":\d+\)", ")", frame)
            if name not in seen:
                counts[name] += int(n)
                seen.add(name)
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile_round", description=__doc__)
    parser.add_argument("--data-path", type=Path, default=Path("../shared/data"))
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--gil-seconds", type=float, default=10.0)
    parser.add_argument("--coordinator-args", default="", help="extra vfl-coordinator options")
    parser.add_argument("--out", type=Path, default=Path("runs/profile"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    job = throughput.ThroughputJob(results=args.out, data_path=args.data_path.resolve())
    train = job.train_config("mlp", 128, args.epochs)
    coordinator = [*procs.train_args(train), "--deadline", "300", *args.coordinator_args.split()]
    pids: list[int] = []
    names: dict[int, dict[int, str]] = {}
    gil: dict[str, Counter[str]] = {}

    def spy() -> None:  # names and the GIL samples, beside the CPU snapshots
        for pid in pids:
            names[pid] = thread_names(pid)
        for label, pid in (("coordinator", pids[0]), ("client0", pids[1])):
            gil[label] = gil_profile(pid, args.gil_seconds, args.out / f"{label}-gil.txt")

    spying = threading.Thread(target=spy, daemon=True)

    def mark() -> float:  # at each epoch's end: every thread's CPU so far
        snapshots.append({pid: thread_cpu(pid) for pid in pids})
        if len(snapshots) == 2 and PY_SPY.exists():
            spying.start()
        return 0.0

    snapshots: list[dict[int, dict[int, float]]] = []
    watch = procs.EpochWatch(mark, args.epochs)
    with tempfile.TemporaryDirectory(prefix="vfl-profile-") as tmp_dir:
        tmp = Path(tmp_dir)
        dirs = throughput.prepare(job, tmp / "data")
        with procs.federation(dirs, tmp / "run", coordinator, pids=pids) as out:
            watch.start(out)
        watch.stop()
        if spying.is_alive() or spying.ident is not None:
            spying.join()
        epochs = procs.results(out)["epochs"]
    rounds = sum(e["rounds"] for e in epochs[1 : len(snapshots)])
    wall = sum(e["seconds"] for e in epochs[1 : len(snapshots)])
    print(f"{rounds} rounds in {wall:.1f} s: {1000 * wall / rounds:.1f} ms per round (wall)")
    first, last = snapshots[0], snapshots[-1]
    total = 0.0
    for i, pid in enumerate(pids):
        label = "coordinator" if i == 0 else f"client{i - 1}"
        per = {
            tid: 1000 * (cpu - first[pid].get(tid, 0.0)) / rounds for tid, cpu in last[pid].items()
        }
        total += sum(per.values())
        print(f"{label}: {sum(per.values()):.2f} CPU ms per round")
        by_name: Counter[str] = Counter()
        for tid, ms in per.items():
            by_name[re.sub(r"_\d+$", "", names.get(pid, {}).get(tid, "native (grpc core)"))] += ms
        for name, ms in by_name.most_common():
            if ms >= 0.05:
                print(f"    {ms:6.2f} ms  {name}")
    print(f"all processes: {total:.2f} CPU ms per round")
    for label, counts in gil.items():
        samples = max(counts.values(), default=1)
        print(f"\n{label}, Python holding the GIL ({samples} samples = 100%):")
        ours = [(k, v) for k, v in counts.most_common() if re.search(r"vfl_|grpc|protobuf", k)]
        for name, n in ours[:25]:
            print(f"  {100 * n / samples:5.1f}%  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
