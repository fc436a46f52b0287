"""The coordinator's peak RSS when a party answers the test evaluation's Embed with an oversize
embedding (issue 33 item 8): real processes, digits in 2 blocks, 1 epoch, plaintext on loopback.

    python -m benchmarks.reply_limit_rss [--tree DIR] [--mib 120] [--honest]

`--tree` is the checkout whose code the coordinator and clients run (PYTHONPATH), to compare
two versions with the same script; `--mib` the size of the hostile embedding (under the
channel's 128 MiB cap, over the 64 MiB a tensor may carry); `--honest` runs both parties
unchanged instead. Prints the coordinator's peak RSS (GNU time's %M) and the log line of the
refusal. Uses the test suite's process harness (tests/harness.py).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

HOSTILE = """
import sys
import numpy as np
from vfl_client import servicer
from vfl_wire.tensors import encode_array
from vfl_wire.v1 import vfl_pb2

honest = servicer.PartyServicer.Embed
MIB = int(sys.argv.pop(1))

def Embed(self, request, context):
    if request.train:
        return honest(self, request, context)
    big = np.zeros((MIB * 2**20 // 4096, 1024), np.float32)
    return vfl_pb2.EmbedReply(round_id=request.round_id, embedding=encode_array(big))

servicer.PartyServicer.Embed = Embed
from vfl_cli.client_cmd import main
sys.argv[0] = "vfl-client"
main()
"""


def run(tree: Path, mib: int, honest: bool) -> dict[str, object]:
    os.environ["PYTHONPATH"] = str(tree)
    from harness import SECRET, Client, Cluster, prepare_digits

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        parties = prepare_digits(root, p_miss=0.1, seed=0, clients=2)
        with Cluster(root / "cluster") as cluster:
            coord = cluster.coordinator(
                clients=2, epochs=1, wrap=["/usr/bin/time", "-f", "peak-rss-kb %M"]
            )
            cluster.client(coord, parties[0])
            if honest:
                cluster.client(coord, parties[1])
            else:
                argv = [sys.executable, "-c", HOSTILE, str(mib), "--data", str(parties[1])]
                argv += ["--coordinator", coord.planned_address, "--listen", "127.0.0.1:0"]
                argv += ["--secret", SECRET, "--insecure", "--alignment", coord.alignment]
                cluster._spawn(Client, "hostile-party1", argv, data=parties[1])
            code = coord.wait(600)
            log = coord.log()
    peak = re.search(r"peak-rss-kb (\d+)", log)
    said = [line for line in log.splitlines() if "Embed to block 1" in line]
    return {
        "exit": code,
        "peak RSS MB": int(peak.group(1)) / 1024 if peak else None,
        "Embed to block 1": said[:1],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.reply_limit_rss")
    parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--mib", type=int, default=120)
    parser.add_argument("--honest", action="store_true")
    args = parser.parse_args(argv)
    result = run(args.tree.resolve(), args.mib, args.honest)
    print(f"tree {args.tree} mib {args.mib} honest {args.honest}: {result}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
