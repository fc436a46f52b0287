"""One-row latency of a serving party's models in each format a bundle could use (issue 31):
eager PyTorch modules, TorchScript (traced, what bundles hold), torch.export's program, and ONNX
Runtime where it is importable (optional: `--onnx-path DIR` adds a directory holding onnxruntime,
onnx and onnxscript to the end of sys.path; it is not a dependency).

    python -m benchmarks.serve_formats [--onnx-path DIR] [--calls 3000]

The Credit-size party of `vfl bench serve`: MLP 5 -> 10 -> 10 -> 10 and a linear head; the work
of one request at the gateway: embed one row, the head on the mean of four embeddings. Median
microseconds over `--calls` calls after a warm-up, all formats alternated in one run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from vfl_core.model.model_config import ModelConfig
from vfl_core.model.models import build_head, build_representation


def models() -> tuple[torch.nn.Module, torch.nn.Module]:
    config = ModelConfig(representation="mlp", hidden=(10, 10), embed_dim=10, head="linear")
    f = build_representation(config, (5,), 0).eval()
    g = build_head(config, 2, 1).eval()
    return f, g


def runners(onnx_path: Path | None) -> dict[str, Callable[[np.ndarray], np.ndarray]]:
    f, g = models()
    x = torch.zeros(1, 5)
    e = torch.zeros(1, 10)
    out: dict[str, Callable[[np.ndarray], np.ndarray]] = {}

    def torch_runner(fm, gm) -> Callable[[np.ndarray], np.ndarray]:
        def run(row: np.ndarray) -> np.ndarray:
            with torch.no_grad():
                emb = fm(torch.from_numpy(row))
                return torch.softmax(gm(torch.stack([emb, emb, emb, emb]).mean(0)), 1).numpy()

        return run

    out["eager"] = torch_runner(f, g)
    with torch.no_grad():
        out["torchscript"] = torch_runner(torch.jit.trace(f, x), torch.jit.trace(g, e))
        out["torch.export"] = torch_runner(
            torch.export.export(f, (x,)).module(), torch.export.export(g, (e,)).module()
        )
    if onnx_path is not None:
        sys.path.append(str(onnx_path))
        import onnxruntime as ort

        tmp = Path(tempfile.mkdtemp())
        torch.onnx.export(f, (x,), tmp / "f.onnx", dynamo=False)
        torch.onnx.export(g, (e,), tmp / "g.onnx", dynamo=False)
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        fs = ort.InferenceSession(str(tmp / "f.onnx"), options)
        gs = ort.InferenceSession(str(tmp / "g.onnx"), options)
        f_in, g_in = fs.get_inputs()[0].name, gs.get_inputs()[0].name

        def onnx_run(row: np.ndarray) -> np.ndarray:
            emb = fs.run(None, {f_in: row})[0]
            logits = gs.run(None, {g_in: np.stack([emb] * 4).mean(0)})[0]
            z = np.exp(logits - logits.max(1, keepdims=True))
            return z / z.sum(1, keepdims=True)

        out["onnxruntime"] = onnx_run
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--onnx-path", type=Path, default=None)
    parser.add_argument("--calls", type=int, default=3000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    run = runners(args.onnx_path)
    row = np.random.default_rng(0).normal(size=(1, 5)).astype(np.float32)
    reference = run["eager"](row)
    times: dict[str, list[float]] = {name: [] for name in run}
    for _ in range(200):  # warm-up
        for fn in run.values():
            fn(row)
    for _ in range(args.calls):
        for name, fn in run.items():
            start = time.perf_counter()
            fn(row)
            times[name].append(time.perf_counter() - start)
    print("| format | median us (1 row: embed + head) | p99 us | max abs diff vs eager |")
    print("| --- | ---: | ---: | ---: |")
    for name, ts in times.items():
        p99 = statistics.quantiles(ts, n=100)[98]
        diff = float(np.abs(run[name](row) - reference).max())
        print(f"| {name} | {1e6 * statistics.median(ts):.0f} | {1e6 * p99:.0f} | {diff:.1e} |")


if __name__ == "__main__":
    main()
