"""Issue 33 item 7: every attacker-controlled string is capped, and quoted short when refused."""

from __future__ import annotations

import pytest

from vfl_coordinator.admission import Admission
from vfl_core.errors import ProtocolError
from vfl_core.protocol import PartyInfo
from vfl_wire import convert
from vfl_wire.status import PermissionError_

BASE = {
    "party_id": "party0",
    "block": 0,
    "num_blocks": 2,
    "dataset": "d",
    "feature_shape": (3,),
    "num_classes": 2,
    "has_labels": True,
}


@pytest.mark.parametrize(
    ("samples", "message"),
    [
        ({"s" * 1_000_000: 5}, r"split name 's{64}'\.\.\. \(1000000 characters\): at most 128"),
        ({"tr\nain": 5}, "split name 'tr\\\\nain': at most 128 printable"),
        ({f"split{i}": 1 for i in range(9)}, "more than 8 splits"),
    ],
)
def test_given_party_info_with_bad_split_names_when_decoded_then_refused_short(samples, message):
    msg = convert.party_info_to_proto(PartyInfo(**BASE))
    for split, n in samples.items():
        msg.samples[split] = n
    with pytest.raises(ProtocolError, match=message) as err:
        convert.party_info_from_proto(msg)
    assert len(str(err.value)) < 300


def test_given_train_and_test_splits_when_decoded_then_accepted() -> None:
    info = PartyInfo(**{**BASE, "samples": {"train": 10, "test": 3}})
    assert convert.party_info_from_proto(convert.party_info_to_proto(info)) == info


def test_given_header_naming_a_huge_other_party_when_admitted_then_quoted_short() -> None:
    admission = Admission({"party0": [0], "party1": [1]})
    with pytest.raises(PermissionError_) as err:
        admission.check(PartyInfo(**BASE), "x" * 1000, None)
    assert "(1000 characters)" in str(err.value) and len(str(err.value)) < 200
