"""Issue 33 item 8: each call's receive limit is what the call may carry (vfl_wire.reply_limits).

A reply larger than its call's limit is refused by gRPC from its length prefix, before it is
read, with a log line naming the party and the call; replies within it pass. In process against
a fake party, and with real processes: a vfl-client that answers the test evaluation's Embed with
a 100 MiB embedding (under the channel's 128 MiB, over the 64 MiB a tensor may carry).
"""

from __future__ import annotations

import json
import sys
from concurrent import futures
from pathlib import Path

import grpc
import numpy as np
import pytest
from harness import SECRET, Client, Cluster, prepare_digits

from vfl_coordinator.party_client import PartyClient
from vfl_core.protocol import EmbedCall
from vfl_wire import reply_limits
from vfl_wire.channels import MAX_MESSAGE_BYTES
from vfl_wire.tensors import MAX_TENSOR_BYTES, encode_array
from vfl_wire.v1 import vfl_pb2, vfl_pb2_grpc

MIB = 1024 * 1024


def test_given_a_party_when_its_limits_are_set_then_each_call_gets_what_it_may_carry() -> None:
    limits = reply_limits.party_reply_limits(rows=1000)
    assert limits["Embed"] == limits["Predict"] == MAX_TENSOR_BYTES + reply_limits.FRAMING
    assert limits["IdHashes"] == 1000 * 34 + reply_limits.FRAMING
    assert limits["PsiBlind"] == 1000 * 32 + reply_limits.FRAMING
    for small in (
        "Backward",
        "Shutdown",
        "PsiKeys",
        "Checkpoint",
        "ClassWeights",
        "Absent",
    ):
        assert limits[small] == reply_limits.SMALL_REPLY
    for several in ("Fuse", "Train", "Score", "Step", "Round"):
        assert limits[several] == MAX_MESSAGE_BYTES
    methods = {m.name for m in vfl_pb2.DESCRIPTOR.services_by_name["Party"].methods}
    assert set(limits) == methods  # every call of the service has its limit
    config = json.loads(reply_limits.service_config(limits))
    named = {
        c["name"][0]["method"]: int(c["maxResponseMessageBytes"]) for c in config["methodConfig"]
    }
    assert named == limits


def test_given_an_evaluation_of_full_histograms_when_answered_over_round_then_it_fits() -> None:
    # the label party's Round reply to a direct-plane evaluation: every batch scored, two
    # predictions each (its head's and the federation's), a binary task's histograms filled
    from vfl_core.inference.scoring import AUC_BINS
    from vfl_core.protocol import EvalAnswer, RoundResult, ScoreResult
    from vfl_core.training.direct_eval import MAX_BATCHES
    from vfl_wire.convert_direct import round_result_to_proto

    rng = np.random.default_rng(0)
    hist = {n: rng.integers(0, 10**6, (2, AUC_BINS)) for n in ("0", "federation")}
    conf = {n: rng.integers(0, 10**6, (2, 2)) for n in hist}
    score = ScoreResult(confusion=conf, histograms=hist)
    answers = tuple(EvalAnswer(i, (0, 1, 2), score) for i in range(MAX_BATCHES))
    size = round_result_to_proto(RoundResult(7, evaluated=answers)).ByteSize()
    limits = reply_limits.party_reply_limits(rows=1000)
    assert reply_limits.SMALL_REPLY < size <= limits["Round"]  # (over 64 KiB: why Round is large)


class _BigParty(vfl_pb2_grpc.PartyServicer):
    """Answers Embed with `rows` x 1024 float32."""

    def __init__(self) -> None:
        self.rows = 1

    def Embed(self, request, context):
        tensor = encode_array(np.zeros((self.rows, 1024), np.float32))
        return vfl_pb2.EmbedReply(round_id=request.round_id, embedding=tensor)


def test_given_replies_over_their_calls_limit_when_received_then_refused_unread() -> None:
    party = _BigParty()
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=2),
        options=[("grpc.max_send_message_length", MAX_MESSAGE_BYTES)],
    )
    vfl_pb2_grpc.add_PartyServicer_to_server(party, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    client = PartyClient(f"127.0.0.1:{port}", "run", "party1", rows=100)
    try:
        call = EmbedCall(3, "test", np.arange(party.rows), b"d", False, [0, 1])
        assert client.embed(call, timeout=30).result().shape == (1, 1024)
        party.rows = 80 * MIB // 4096  # 80 MiB: under the channel's 128 MiB, over one tensor's cap
        with pytest.raises(grpc.RpcError) as err:
            client.embed(call, timeout=30).result()
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert str(client.reply_limits["Embed"]) in (err.value.details() or "")
    finally:
        client.close()
        server.stop(0).wait()


HOSTILE = """
import sys
import numpy as np
from vfl_client import servicer
from vfl_wire.tensors import encode_array
from vfl_wire.v1 import vfl_pb2

honest = servicer.PartyServicer.Embed

def Embed(self, request, context):  # the test evaluation's calls get 100 MiB
    if request.train:
        return honest(self, request, context)
    big = np.zeros((100 * 2**20 // 4096, 1024), np.float32)
    return vfl_pb2.EmbedReply(round_id=request.round_id, embedding=encode_array(big))

servicer.PartyServicer.Embed = Embed
from vfl_cli.client_cmd import main
sys.argv[0] = "vfl-client"
main()
"""


@pytest.mark.slow
def test_given_a_party_sending_an_oversize_embedding_when_evaluating_then_refused_naming_it(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # the worker's copy of these files (other modules on it prepare the same), made once
    parties = prepare_digits(tmp_path_factory.getbasetemp(), p_miss=0.1, seed=0, clients=2)
    with Cluster(tmp_path / "cluster") as cluster:
        coord = cluster.coordinator(clients=2, epochs=1)
        cluster.client(coord, parties[0])
        argv = [sys.executable, "-c", HOSTILE, "--data", str(parties[1])]
        argv += ["--coordinator", coord.planned_address, "--listen", "127.0.0.1:0"]
        argv += ["--secret", SECRET, "--insecure", "--alignment", coord.alignment]
        cluster._spawn(Client, "hostile-party1", argv, data=parties[1])
        assert coord.wait(300) == 0, cluster.describe()
        log = coord.log()
        limit = MAX_TENSOR_BYTES + reply_limits.FRAMING
        said = f"party 'party1' sent a Embed reply over the {limit} bytes such a reply may carry"
        assert said in log
        assert "refused unread" in log
