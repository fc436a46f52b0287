"""A serving party's rows from a lookup function the user plugs in (issue 31 item 2:
`vfl-client --serve-bundle DIR --lookup module:function`): the same features as its table,
wrong answers refused naming the function and the entry, a module that does not import an
error at start; and with real processes, a party serving through its function answers as it
would from its table, and a function that answers wrongly affects only the request that met it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import urllib.request

import numpy as np
import pytest
from tabular_tables import LABEL_COLUMN, write_tables
from test_serving_bundle import SECRET, trained

from benchmarks.serve.cluster import SECRET as CLUSTER_SECRET
from benchmarks.serve.cluster import ServingCluster, train_bundles
from vfl_core.config import TrainConfig
from vfl_core.errors import ConfigError
from vfl_core.model.model_config import ModelConfig
from vfl_core.serving.bundle import load_bundle, write_bundle
from vfl_core.serving.features import FeatureTable
from vfl_core.serving.gateway import Gateway
from vfl_core.serving.lookup import LookupFeatures, import_lookup
from vfl_core.serving.peers import DOWN, LocalPeer, PeerAnswer, PeerFailure
from vfl_core.training.alignment import hash_ids

ID = "customer_id"
BAD_ID = "C-answer-wrongly"  # the store module below answers this one with a wrong shape

# The user's module: rows of a CSV indexed by keyed ID (no raw ID crosses a link).
STORE = """
import csv, os
from vfl_core.training.alignment import hash_ids

SECRET = {secret!r}.encode()
with open({table!r}, newline="") as f:
    _rows = {{h: {{k: v for k, v in row.items() if k != "customer_id"}}
             for row in csv.DictReader(f)
             for h in hash_ids([row["customer_id"]], SECRET)}}
_bad = hash_ids([{bad!r}], SECRET)[0]

def rows(keys):
    if _bad in keys:
        return [None]  # one entry for many keys: a wrong shape
    return [_rows.get(k) for k in keys]
"""


def csv_rows(path) -> dict[bytes, dict[str, str]]:
    import csv

    with open(path, newline="") as f:
        return {
            hash_ids([r[ID]], SECRET)[0]: {k: v for k, v in r.items() if k != ID}
            for r in csv.DictReader(f)
        }


@pytest.fixture(scope="module")
def telecom(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lookup")
    tables = write_tables(tmp / "data", n=200, share=0.8)
    paths = [tables["bank"], tables["retail"], tables["telecom"]]
    _, parties = trained(paths, ID, LABEL_COLUMN, "classification")
    bank = load_bundle(write_bundle(parties[0], tmp / "party0"))
    bundle = load_bundle(write_bundle(parties[2], tmp / "party2"))
    return bundle, paths[2], bank


def test_given_a_lookup_function_then_the_same_features_as_the_table(telecom) -> None:
    bundle, path, _ = telecom
    table = FeatureTable(path, ID, bundle.preprocessing, SECRET)
    rows = csv_rows(path)
    source = LookupFeatures(lambda keys: [rows.get(k) for k in keys], bundle.preprocessing, "t")
    keys = hash_ids([f"C{i:05d}" for i in range(60)] + ["nobody"], SECRET)
    held, x = source.lookup(keys)
    want_held, want_x = table.lookup(keys)
    assert held.tolist() == want_held.tolist() and not held[-1]
    np.testing.assert_array_equal(x, want_x)


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (lambda keys: None, "returned NoneType"),
        (lambda keys: [None] * (len(keys) + 1), "3 entries for 2 keys"),
        (lambda keys: [1.5, None], "entry 0 is float"),
        (lambda keys: [{"favourite_colour": "red"}, None], "unknown columns"),
        (lambda keys: [{"call_minutes": float("nan")}, None], "finite number"),
        (lambda keys: [{"call_minutes": [1, 2]}, None], "give a number or text"),
        (lambda keys: [{"call_minutes": "lots"}, None], "lots"),
        (lambda keys: 1 / 0, "ZeroDivisionError"),
    ],
)
def test_given_a_wrong_answer_then_a_config_error_naming_it(telecom, answer, message) -> None:
    bundle, _, _ = telecom
    source = LookupFeatures(
        lambda keys: answer(keys) if keys else [], bundle.preprocessing, "store:rows"
    )
    with pytest.raises(ConfigError, match=message) as err:
        source.lookup([b"a" * 32, b"b" * 32])
    assert "--lookup store:rows" in str(err.value)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_such_module_xyz:rows", "cannot import 'no_such_module_xyz'"),
        ("json:no_such_function", "has no 'no_such_function'"),
        ("json.decoder:__doc__", "is not callable"),
        ("just-a-name", "give module:function"),
    ],
)
def test_given_a_lookup_that_does_not_import_then_an_error_naming_it(spec, message) -> None:
    with pytest.raises(ConfigError, match=message):
        import_lookup(spec)
    assert import_lookup("json:dumps") is json.dumps


def _store_down(keys):
    """A user's lookup whose store is down: it fails for any ID asked."""
    if keys:
        raise OSError("the store is down")
    return []


def test_given_a_gateway_whose_own_lookup_fails_then_the_others_still_answer(telecom) -> None:
    _, _, bank = telecom

    own = LookupFeatures(_store_down, bank.preprocessing, "store:rows")
    calls = []

    def answer(keys):
        calls.append(len(keys))
        return PeerAnswer(np.zeros(len(keys), bool), np.zeros((0, bank.meta.embed_dim)))

    (got,) = Gateway(bank, own, [LocalPeer("party1", 1, answer)], SECRET, deadline_s=5.0).predict(
        ["C00001"]
    )
    assert calls == [1] and got.missing["party1"] == "does not hold the ID"
    assert got.missing["party0"].startswith("refused: --lookup store:rows raised OSError")


def post(port: int, body: dict) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/predict", data=json.dumps(body).encode()
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        return json.loads(reply.read())


def test_given_a_party_serving_through_its_function_then_as_from_its_table(
    tmp_path, monkeypatch
) -> None:
    tables = write_tables(tmp_path / "data", n=200, share=0.85)
    paths = [tables["bank"], tables["retail"], tables["telecom"]]
    config = TrainConfig(epochs=1, model=ModelConfig(embed_dim=8, hidden=(16,)))
    bundles, _, _ = train_bundles(
        paths, tmp_path / "bundles", id_column=ID, label_column=LABEL_COLUMN, config=config
    )
    store = tmp_path / "modules" / "telecom_store.py"
    store.parent.mkdir()
    store.write_text(
        textwrap.dedent(STORE.format(secret=CLUSTER_SECRET, table=str(paths[2]), bad=BAD_ID))
    )
    monkeypatch.setenv("PYTHONPATH", f"{store.parent}:{':'.join(sys.path)}")
    with ServingCluster(tmp_path / "procs") as cluster:
        one = cluster.start_party("party1", bundles[1], paths[1], ID)
        two = cluster.start_party("party2", bundles[2], None, ID, lookup="telecom_store:rows")
        peers = [f"1=127.0.0.1:{one.port}", f"2=127.0.0.1:{two.port}"]
        extra = ["--deadline-ms", "2000"]
        gw = cluster.start_gateway("party0", bundles[0], paths[0], ID, peers, extra)
        ids = [f"C{i:05d}" for i in range(40)]
        served = post(gw.http_port, {"ids": ids})["predictions"]
        wrong = post(gw.http_port, {"ids": ["C00001", BAD_ID]})["predictions"]
        after = post(gw.http_port, {"ids": ids[:5]})["predictions"]
    local = {b: load_bundle(bundles[b]) for b in range(3)}
    feature_tables = {
        b: FeatureTable(paths[b], ID, local[b].preprocessing, CLUSTER_SECRET.encode())
        for b in range(3)
    }

    def peer(b: int) -> LocalPeer:
        def answer(keys):
            held, x = feature_tables[b].lookup(keys)
            return PeerAnswer(held, local[b].embed(x))

        return LocalPeer(f"party{b}", b, answer)

    expected = Gateway(
        local[0], feature_tables[0], [peer(1), peer(2)], CLUSTER_SECRET.encode(), deadline_s=5.0
    ).predict(ids)
    assert any("party2" in a["parties"] for a in served)
    for got, want in zip(served, expected, strict=True):
        assert (got["id"], tuple(got["parties"])) == (want.id, want.used)
        if want.probabilities is not None:
            np.testing.assert_allclose(got["probabilities"], want.probabilities, atol=1e-5)
    for answer in wrong:  # the wrong answer: party2 refused for this request only
        assert answer["missing"]["party2"].startswith("refused: --lookup telecom_store:rows")
        assert "1 entries for 2 keys" in answer["missing"]["party2"]
    assert [a["parties"] for a in after] == [a["parties"] for a in served[:5]]


def test_given_a_lookup_module_that_does_not_import_then_the_party_exits_saying_so(
    tmp_path,
) -> None:
    tables = write_tables(tmp_path / "data", n=120, share=0.9)
    paths = [tables["bank"], tables["retail"], tables["telecom"]]
    config = TrainConfig(epochs=1, model=ModelConfig(embed_dim=4, hidden=(8,)))
    bundles, _, _ = train_bundles(
        paths, tmp_path / "bundles", id_column=ID, label_column=LABEL_COLUMN, config=config
    )
    argv = [
        sys.executable, "-m", "vfl_cli.client_cmd", "--serve-bundle", str(bundles[2]),
        "--lookup", "no_such_store_module:rows", "--insecure", "--listen", "127.0.0.1:0",
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "--lookup no_such_store_module:rows: cannot import" in done.stderr
    assert "Traceback" not in done.stderr


def test_given_no_party_answers_and_the_own_lookup_fails_then_each_id_an_error(telecom) -> None:
    _, _, bank = telecom

    def down(keys):
        raise PeerFailure(DOWN)

    own = LookupFeatures(_store_down, bank.preprocessing, "store:rows")
    gw = Gateway(bank, own, [LocalPeer("party1", 1, down)], SECRET, deadline_s=5.0)
    answers = gw.predict(["C00001", "C00002"])
    assert [a.error is not None and a.used == () for a in answers] == [True, True]
    assert all(a.missing["party1"] == DOWN for a in answers)
