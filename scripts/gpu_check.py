"""The project's GPU check (scripts/gpu-check.sh): what a session lent an NVIDIA machine runs once.

1. A real federation of a coordinator and four `vfl-client --device DEVICE` processes over gRPC
   on localhost (the embedded digits, 4 quadrants), for each device asked (cpu, cuda): the
   seconds per training epoch (results.json) and the test accuracy.
2. Serving latency on that federation: Evaluate and Predict of the whole test split (answered by the
   four parties on their device) called repeatedly while the coordinator serves: median and p95.
3. `vfl bench scale throughput`: samples/s in process against over gRPC on the machine's cores (it
   needs the MNIST IDX files; skipped with a line when they are not there).
4. `vfl bench serve --device D` for each device: online serving (the label party as gateway, one
   ID per request) latency and throughput at 1, 8 and 64 callers, every party up and one frozen
   (it needs UCI_Credit_Card.csv in --data-path; skipped with a line when it is not there).

Every figure goes into one markdown file (default benchmarks/results/gpu.md) with the command
that produced it and the machine it ran on. Bounded: each federation trains `--epochs` epochs,
each step has a timeout, and every process started is stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vfl_cli.coordinator_client import CoordinatorClient

# Started as modules of this interpreter, so the check runs from a checkout on PYTHONPATH as well
# as from the venv (a device machine has its own Python and no network to install into a venv).
VFL = [sys.executable, "-m", "vfl_cli"]
VFL_CLIENT = [sys.executable, "-m", "vfl_cli.client_cmd"]
VFL_COORDINATOR = [sys.executable, "-m", "vfl_cli.coordinator_cmd"]
CLIENTS = 4


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


def machine() -> str:
    gpus = run(["nvidia-smi", "-L"], 30).stdout.strip() if _has("nvidia-smi") else "no GPU"
    return f"{platform.node()}: {os.cpu_count()} CPUs; {gpus or 'nvidia-smi listed none'}"


def _has(program: str) -> bool:
    return any((Path(p) / program).exists() for p in os.environ.get("PATH", "").split(":"))


def federation(work: Path, data: Path, device: str, epochs: int, calls: int) -> dict[str, object]:
    """Train a federation whose clients run on `device`, then time `vfl evaluate` while it
    serves; every process is stopped before returning."""
    port = free_port()
    out = work / f"run-{device}"
    coordinator = [*VFL_COORDINATOR, "--clients", str(CLIENTS), "--epochs", str(epochs)]
    coordinator += ["--listen", f"127.0.0.1:{port}", "--out", str(out), "--serve", "--insecure"]
    coordinator += ["--no-progress", "--farewell", "0"]
    procs = [subprocess.Popen(coordinator, stdout=(work / f"coord-{device}.log").open("w"),
                              stderr=subprocess.STDOUT)]  # fmt: skip
    for k in range(CLIENTS):
        client = [*VFL_CLIENT, "--data", str(data / f"quadrant{k}")]
        client += ["--coordinator", f"127.0.0.1:{port}", "--device", device, "--insecure"]
        log = (work / f"client{k}-{device}.log").open("w")
        procs.append(subprocess.Popen(client, stdout=log, stderr=subprocess.STDOUT))
    try:
        results = _wait_results(out / "results.json", procs[0], timeout=120 + 60 * epochs)
        evaluate = [*VFL, "evaluate", "--coordinator", f"127.0.0.1:{port}", "--insecure"]
        done = run(evaluate, 120)  # once through the CLI: the command a user runs works
        if done.returncode != 0:
            raise RuntimeError(f"vfl evaluate failed on {device}: {done.stderr.strip()}")
        # Then the serving round trip alone (no process start): the coordinator's Evaluate and
        # Predict of the whole test split, answered by the four parties on `device`.
        seconds, predict_s = [], []
        with CoordinatorClient(f"127.0.0.1:{port}", timeout=120) as client:
            for _ in range(calls):
                start = time.perf_counter()
                client.evaluate("test")
                seconds.append(time.perf_counter() - start)
                start = time.perf_counter()
                client.predict("test", None)
                predict_s.append(time.perf_counter() - start)
        epochs_s = [float(e["seconds"]) for e in results["epochs"]]
        overall = next(r for r in results["test"]["rows"] if r["observed"] == "all")
        return {
            "device": device,
            "epoch_s": statistics.median(epochs_s),
            "accuracy": overall.get("accuracy"),
            "evaluate_p50_s": statistics.median(seconds),
            "evaluate_p95_s": sorted(seconds)[math.ceil(0.95 * len(seconds)) - 1],  # nearest rank
            "predict_p50_s": statistics.median(predict_s),
            "test_samples": overall["samples"],
        }
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def _wait_results(path: Path, coordinator: subprocess.Popen, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.is_file():
            try:
                return json.loads(path.read_text())
            except json.JSONDecodeError:
                pass  # being written
        if coordinator.poll() is not None:
            raise RuntimeError(
                f"the coordinator exited {coordinator.returncode} before training ended"
            )
        time.sleep(1.0)
    raise RuntimeError(f"no {path} within {timeout:.0f}s")


def throughput(data_path: Path, work: Path) -> str:
    """`vfl bench scale throughput` (in process vs gRPC) into `work`; its markdown, or why not."""
    if not (data_path / "t10k-images-idx3-ubyte.gz").exists():
        return f"skipped: no MNIST IDX files in {data_path}"
    argv = [*VFL, "bench", "scale", "throughput", "--data-path", str(data_path)]
    argv += ["--models", "mlp", "--repeats", "3", "--results", str(work / "throughput")]
    done = run(argv, 480)
    if done.returncode != 0:
        return f"failed: {done.stderr.strip()[-500:]}"
    report = work / "throughput" / "throughput.md"
    return report.read_text() if report.exists() else done.stdout


def serving(data_path: Path, work: Path, device: str) -> str:
    """`vfl bench serve --device DEVICE` at RTT 0 (up and stop) into `work`; its table, or why
    not."""
    if not (data_path / "UCI_Credit_Card.csv").exists():
        return f"skipped: no UCI_Credit_Card.csv in {data_path}"
    results = work / f"serve-{device}"
    argv = [*VFL, "bench", "serve", "--data-path", str(data_path), "--device", device]
    argv += ["--rtts", "0", "--modes", "up,stop", "--seconds", "2", "--results", str(results)]
    done = run(argv, 300)
    if done.returncode != 0:
        return f"failed: {done.stderr.strip()[-500:]}"
    report = results / "serve.md"
    return report.read_text() if report.exists() else done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", default="cpu,cuda", help="client devices to compare")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20, help="vfl evaluate calls per device")
    parser.add_argument("--data-path", type=Path, default=Path("../shared/data"))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/gpu.md"))
    parser.add_argument("--no-throughput", action="store_true")
    parser.add_argument("--no-serve", action="store_true", help="skip `vfl bench serve`")
    args = parser.parse_args()
    command = "bash scripts/gpu-check.sh " + " ".join(sys.argv[1:])
    with tempfile.TemporaryDirectory(prefix="vfl-gpu-") as tmp:
        work = Path(tmp)
        prepare = [*VFL, "prepare", "--dataset", "digits", "--clients", str(CLIENTS)]
        prepare += ["--out", str(work / "data"), "--prefix", "quadrant", "--p-miss", "0.1"]
        done = run(prepare, 300)
        if done.returncode != 0:
            sys.exit(f"vfl prepare failed: {done.stderr.strip()}")
        rows = [
            federation(work, work / "data", d.strip(), args.epochs, args.calls)
            for d in args.devices.split(",")
            if d.strip()
        ]
        bench = (
            "not run (--no-throughput)" if args.no_throughput else throughput(args.data_path, work)
        )
        served = [
            (d, serving(args.data_path, work, d))
            for d in args.devices.split(",")
            if d.strip() and not args.no_serve
        ]
    lines = [
        "# GPU check",
        "",
        f"Command: `{command}` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}).",
        f"Machine: {machine()}.",
        "",
        f"## A federation of a coordinator and {CLIENTS} clients over gRPC (digits, 4 quadrants)",
        "",
        f"{args.epochs} epochs; then, while the coordinator serves, the whole test split "
        f"evaluated and predicted {args.calls} times each through the coordinator's Evaluate and "
        "Predict RPCs (round trip from a Python client, no process start).",
        "",
        "| client device | s/epoch (median) | test accuracy | test rows | evaluate p50 s | "
        "evaluate p95 s | predict p50 s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        accuracy = f"{100 * r['accuracy']:.2f}%" if isinstance(r["accuracy"], float) else "-"
        lines.append(
            f"| {r['device']} | {r['epoch_s']:.3f} | {accuracy} | {r['test_samples']} | "
            f"{r['evaluate_p50_s']:.3f} | {r['evaluate_p95_s']:.3f} | {r['predict_p50_s']:.3f} |"
        )
    lines += ["", "## In process against gRPC (`vfl bench scale throughput`)", "", bench, ""]
    for device, report in served:
        heading = f"## Online serving with --device {device} (`vfl bench serve`)"
        body = report.split("\n", 1)[1] if report.startswith("# ") else report  # its title
        lines += ["", heading, "", body.strip(), ""]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
