"""A method step's schema and record (vfl_core.methods, vfl_wire.records): what the one check
accepts and refuses, and round trips through the wire."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pytest

from vfl_core.errors import ProtocolError
from vfl_core.methods.record import Record, StepHeader
from vfl_core.methods.schema import BATCH, INDEX, ScalarSpec, Schema, TensorSpec, check
from vfl_core.methods.steps import StepSpec, decode_call, decode_result, encode_call, encode_result
from vfl_wire import convert, records
from vfl_wire.tensors import encode_array


def _reject_odd(header: StepHeader | None, record: Record) -> None:
    if record.scalars.get("count", 0) % 2:
        raise ProtocolError("count: odd")


SCHEMA = Schema(
    (
        ScalarSpec("count", int, low=0, high=10, binds="S"),
        ScalarSpec("mode", int, choices=(1, 2), what="mode"),
        TensorSpec("x", "float32", (BATCH, "S", "d")),
        TensorSpec("index", INDEX, (BATCH,), optional=True),
        TensorSpec("per_block", "float32", (BATCH, "d"), keyed=True),
    ),
    split=True,
    rows="required",
    limits=((BATCH, 1, 100, "empty or too big"),),
    what="test step",
    rules=(_reject_odd,),
)
ROWS = np.arange(3, dtype=np.int64)


def _record(**changes: object) -> Record:
    record = Record(
        tensors={"x": np.zeros((3, 2, 4), np.float32)},
        maps={"per_block": {0: np.ones((3, 4), np.float32), 2: np.ones((3, 4), np.float32)}},
        scalars={"count": 2, "mode": 1},
    )
    for name, value in changes.items():
        for part in (record.tensors, record.maps, record.scalars):
            if name in part:
                if value is None:
                    del part[name]
                else:
                    part[name] = value  # type: ignore[assignment]
                break
        else:
            record.tensors[name] = value  # type: ignore[assignment]
    return record


def test_given_a_fitting_record_then_every_symbol_is_bound() -> None:
    bound = check(SCHEMA, _record(), StepHeader(4, "train", ROWS, b"d"), {"d": 4})
    assert bound == {"d": 4, "B": 3, "S": 2}


@pytest.mark.parametrize(
    ("record", "header", "message"),
    [
        (
            _record(x=np.zeros((3, 2, 5), np.float32)),
            None,
            "does not match expected (B=3, S=2, d=4)",
        ),
        (_record(x=np.zeros((3, 2, 4), np.float64)), None, "dtype float64 does not match"),
        (_record(x=np.full((3, 2, 4), np.nan, np.float32)), None, "non-finite"),
        (_record(x=None), None, "x: missing"),
        (_record(y=np.zeros(3, np.float32)), None, "unexpected tensor 'y'"),
        (_record(count=11), None, "outside 0..10"),
        (_record(count=3), None, "count: odd"),
        (_record(count=True), None, "expected int"),
        (_record(mode=3), None, "is not one of [1, 2]"),
        (_record(index=np.array([0, -1, 2])), None, "negative value -1 at position 1"),
        (_record(per_block={-1: np.ones((3, 4), np.float32)}), None, "negative block index"),
        (_record(), StepHeader(4, "valid", ROWS), "unknown split"),
        (_record(), StepHeader(4, "train", None, b"d"), "rows: missing"),
        (_record(), StepHeader(-1, "train", ROWS), "negative value -1"),
        (_record(), StepHeader(4, "train", np.arange(0)), "empty or too big"),
    ],
)
def test_given_a_record_that_does_not_fit_then_one_line_naming_the_field(
    record: Record, header: StepHeader | None, message: str
) -> None:
    with pytest.raises(ProtocolError, match=re.escape(message)) as err:
        check(SCHEMA, record, header or StepHeader(4, "train", ROWS, b"d"), {"d": 4})
    assert "\n" not in str(err.value)


@dataclass(frozen=True)
class Call:
    round_id: int
    split: str
    rows: np.ndarray
    digest: bytes
    count: int
    mode: int
    x: np.ndarray
    index: np.ndarray | None
    per_block: dict[int, np.ndarray]


@dataclass(frozen=True)
class Answer:
    loss: float
    out: np.ndarray | None = None


STEP = StepSpec(
    name="Test",
    request=SCHEMA,
    reply=Schema(
        (ScalarSpec("loss", float), TensorSpec("out", "float32", (BATCH, "d"), optional=True))
    ),
    handler=lambda party, call: None,
    call_type=Call,
    result_type=Answer,
)


def test_given_a_call_when_it_crosses_the_wire_then_the_same_call_and_answer_come_back() -> None:
    call = Call(
        7, "test", ROWS, b"d" * 32, 2, 2, np.arange(24, dtype=np.float32).reshape(3, 2, 4),
        np.array([5, 6, 7]), {1: np.ones((3, 4), np.float32)},
    )  # fmt: skip
    header, record = encode_call(STEP, call)
    request = records.step_request("m", "Test", header, record, convert.header("run", "p"))
    got_header, got_record = records.request_from_proto(request, STEP.request)
    got, bound = decode_call(STEP, got_header, got_record, {"d": 4})
    assert got.round_id == 7 and got.split == "test" and got.digest == call.digest
    assert got.count == 2 and got.mode == 2 and got.per_block.keys() == {1}
    for name in ("rows", "x", "index"):
        assert np.array_equal(getattr(got, name), getattr(call, name)), name
    answer = Answer(0.5, np.full((3, 4), 2.0, np.float32))
    reply = records.step_reply(request, encode_result(STEP, answer))
    back = decode_result(STEP, records.reply_from_proto(reply, request, STEP.reply), call, bound)
    assert back.loss == 0.5 and np.array_equal(back.out, answer.out)


def test_given_a_reply_for_another_round_or_with_a_stray_field_then_refused() -> None:
    call = Call(7, "test", ROWS, b"", 2, 1, np.zeros((3, 2, 4), np.float32), None, {})
    request = records.step_request(
        "m", "Test", *encode_call(STEP, call), convert.header("run", "p")
    )
    reply = records.step_reply(request, encode_result(STEP, Answer(1.0)))
    reply.round_id = 6
    with pytest.raises(ProtocolError, match="expected round 7"):
        records.reply_from_proto(reply, request, STEP.reply)
    reply = records.step_reply(request, encode_result(STEP, Answer(1.0)))
    reply.tensors["labels"].CopyFrom(encode_array(np.arange(3)))
    with pytest.raises(ProtocolError, match="unexpected tensor 'labels'"):
        records.reply_from_proto(reply, request, STEP.reply)


def test_given_a_step_with_an_unknown_deadline_phase_then_refused_at_definition() -> None:
    with pytest.raises(ValueError, match="phase 'soon'"):
        StepSpec("Bad", Schema(), Schema(), handler=lambda p, c: None, phase="soon")
