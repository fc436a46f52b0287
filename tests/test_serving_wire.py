"""Online serving's messages (vfl_wire.convert_serving): round trips, and what a hostile peer
could send wrong refused with a ProtocolError naming it."""

from __future__ import annotations

import numpy as np
import pytest

from vfl_core.errors import ProtocolError
from vfl_core.serving.gateway import OnlinePrediction
from vfl_core.serving.peers import PeerAnswer
from vfl_wire import convert_serving as cs
from vfl_wire.tensors import encode_array
from vfl_wire.v1 import serving_pb2

KEYS = [bytes([i]) * 32 for i in range(3)]


def test_given_an_answer_when_sent_then_it_arrives_unchanged() -> None:
    answer = PeerAnswer(np.array([True, False, True]), np.arange(8, dtype=np.float32).reshape(2, 4))
    reply = serving_pb2.ServeEmbedReply.FromString(
        cs.embed_reply_to_proto(2, answer).SerializeToString()
    )
    back = cs.embed_reply_from_proto(reply, 3, 2)
    assert back.held.tolist() == [True, False, True]
    np.testing.assert_array_equal(back.embeddings, answer.embeddings)
    request = cs.embed_request_to_proto(KEYS)
    assert cs.embed_request_from_proto(request) == KEYS


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (serving_pb2.ServeEmbedReply(block=1, held=b"\x01\x00\x01"), "block 1 answered"),
        (serving_pb2.ServeEmbedReply(block=2, held=b"\x01\x00"), "2 held flags for 3"),
        (serving_pb2.ServeEmbedReply(block=2, held=b"\x01\x00\x07"), "held flags"),
        (
            serving_pb2.ServeEmbedReply(
                block=2, held=b"\x01\x00\x01", embeddings=encode_array(np.zeros((1, 4), np.float32))
            ),
            "embeddings",
        ),
        (
            serving_pb2.ServeEmbedReply(
                block=2,
                held=b"\x01\x00\x01",
                embeddings=encode_array(np.full((2, 4), np.nan, np.float32)),
            ),
            "non-finite",
        ),
    ],
)
def test_given_a_malformed_answer_when_received_then_refused(reply, message) -> None:
    with pytest.raises(ProtocolError, match=message):
        cs.embed_reply_from_proto(reply, 3, 2)


@pytest.mark.parametrize(
    ("keys", "message"),
    [([], "0 keys"), ([b"short"], "32-byte"), ([KEYS[0]] * (cs.MAX_KEYS + 1), "4097 keys")],
)
def test_given_a_malformed_embed_request_when_received_then_refused(keys, message) -> None:
    with pytest.raises(ProtocolError, match=message):
        cs.embed_request_from_proto(serving_pb2.ServeEmbedRequest(keys=keys))


def test_given_predictions_when_sent_then_they_arrive_unchanged() -> None:
    answers = [
        OnlinePrediction(
            "a", ("party0", "party1"), {"party2": "timed out"}, (0.25, 0.75), 1, "yes"
        ),
        OnlinePrediction("b", ("party0",), {}, value=123.5),
        OnlinePrediction("c", (), {"party0": "does not hold the ID"}, error="nobody holds it"),
    ]
    reply = serving_pb2.ServePredictReply.FromString(
        cs.predictions_to_proto(answers).SerializeToString()
    )
    assert cs.predictions_from_proto(reply) == answers
    request = cs.predict_request_to_proto(["a", "b"], 0.25, {"a": {"age": 3}})
    assert cs.predict_request_from_proto(request) == (["a", "b"], 0.25, {"a": {"age": "3"}})
    assert cs.predict_request_from_proto(cs.predict_request_to_proto(["a"]))[1] is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--data", "x.csv", "--peer", "1=h:1"], "--peer and --http* are for serving mode"),
        (["--serve-bundle", "b", "--config", "c.yaml"], "--config is for training"),
        (["--serve-bundle", "nowhere", "--insecure"], "not a serving bundle"),
        (["--serve-bundle", "nowhere", "--insecure", "--embed-for", "p1"], "not a serving bundle"),
        (["--data", "x.csv", "--embed-for", "party0"], "--embed-for is for serving mode"),
        (["--serve-bundle", "b", "--device", "tpu"], "--device must be auto, cpu or cuda"),
    ],
)
def test_given_serving_flags_out_of_place_when_starting_then_one_line_says_so(
    tmp_path, args, message
) -> None:
    from typer.testing import CliRunner

    from vfl_cli.client_cmd import client
    from vfl_cli.command import single

    result = CliRunner().invoke(single(client), args)
    assert result.exit_code != 0 and message in result.output, result.output
    assert "Traceback" not in result.output
