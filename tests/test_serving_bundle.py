"""Serving bundles (issue 31): a LASER-VFL federation trained in process, each party's bundle
written, and the bundles' predictions of the test split, read back from the parties' own tables
by keyed ID, equal to the federation's own (to 1e-5), for classification and regression."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tabular_tables import HOUSE_ID, LABEL_COLUMN, PRICE, write_linear_tables, write_tables
from typer.testing import CliRunner

from vfl_cli.app import app
from vfl_core.config import TrainConfig
from vfl_core.data.preprocess import TabularPreprocessor
from vfl_core.data.table_files import read_table
from vfl_core.data.tabular import federation_sources, load_table_federation
from vfl_core.errors import ConfigError, DataError
from vfl_core.model.model_config import ModelConfig
from vfl_core.persistence.checkpoint import save_party_checkpoint
from vfl_core.serving import predictions_with_rows
from vfl_core.serving.bundle import META_FILE, load_bundle, write_bundle
from vfl_core.serving.features import FeatureTable, inline_features
from vfl_core.training.alignment import hash_ids
from vfl_core.training.engine import Federation
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party

SECRET = b"serving-test-secret"


def trained(paths: list[Path], id_column: str, label: str, task: str, **kw: object):
    sources = federation_sources(
        paths, None, id_column=id_column, label_column=label, label_blocks=None, task=task
    )
    config = TrainConfig(epochs=2, model=ModelConfig(embed_dim=8, hidden=(16,)), **kw)
    parties = {
        d.meta.block: Party(f"party{d.meta.block}", d, config, secret=SECRET)
        for d in load_table_federation(sources)
    }
    fed = Federation(InProcessTransport(parties), config, progress=False)
    fed.align()
    fed.train()
    return fed, parties


def bundle_predictions(tmp_path: Path, fed, parties, paths, id_column):
    """(federation's, bundles') predictions of every test sample with a head's answer; the
    bundles carry the run's validation choice."""
    bundles, tables = {}, {}
    for block, party in parties.items():
        write_bundle(party, tmp_path / party.party_id, choice=fed.serving_choice())
        bundles[block] = load_bundle(tmp_path / party.party_id)
        assert bundles[block].preprocessing is not None
        tables[block] = FeatureTable(paths[block], id_column, bundles[block].preprocessing, SECRET)
    samples, _ = predictions_with_rows(fed, "test", None)
    got, want = [], []
    for s in samples:
        if not s.party_probs:
            continue
        embeddings = {}
        for b in s.observed:
            sample_id = parties[b].split("test").ids[s.rows[b]]
            held, x = tables[b].lookup(hash_ids([sample_id], SECRET))
            assert held.tolist() == [True]
            embeddings[b] = bundles[b].embed(x)
        for head, probs in s.party_probs.items():
            bundle = bundles[head]
            kept = {b: e for b, e in embeddings.items() if b in bundle.kept(tuple(s.observed))}
            got.append(bundle.predict(kept, bundle.head_for(tuple(s.observed)))[0])
            want.append(probs)
    return np.array(got), np.array(want)


def test_given_trained_laser_classification_when_bundles_predict_then_equal_federation(
    tmp_path: Path,
) -> None:
    tables = write_tables(tmp_path / "data", n=300, share=0.8)
    paths = [tables["bank"], tables["retail"], tables["telecom"]]
    fed, parties = trained(paths, "customer_id", LABEL_COLUMN, "classification")
    got, want = bundle_predictions(tmp_path, fed, parties, paths, "customer_id")
    assert len(got) > 20 and got.shape[1] == 2
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
    meta = load_bundle(tmp_path / "party0").meta
    assert meta.classes == ("no", "yes") and meta.has_head and meta.block == 0
    assert not load_bundle(tmp_path / "party1").meta.has_head  # a feature party: no head


def test_given_trained_laser_regression_when_bundles_predict_then_equal_federation(
    tmp_path: Path,
) -> None:
    tables = write_linear_tables(tmp_path / "data", n=300, share=0.9)
    paths = [tables["owner"], tables["agent"]]
    fed, parties = trained(paths, HOUSE_ID, PRICE, "regression")
    got, want = bundle_predictions(tmp_path, fed, parties, paths, HOUSE_ID)
    assert len(got) > 20 and got.shape[1] == 1
    np.testing.assert_allclose(got, want, atol=1e-5 * np.abs(want).max(), rtol=0)
    assert abs(load_bundle(tmp_path / "party0").meta.target_mean - 100) < 20  # original units


def test_given_a_bundle_when_inspected_then_it_holds_only_its_own_party(tmp_path: Path) -> None:
    tables = write_tables(tmp_path / "data", n=120)
    paths = [tables["bank"], tables["retail"]]
    sources = federation_sources(
        paths, None, id_column="customer_id", label_column=LABEL_COLUMN, label_blocks=None
    )
    config = TrainConfig(epochs=1, model=ModelConfig(embed_dim=4, hidden=(8,)))
    data = load_table_federation(sources)
    write_bundle(Party("party1", data[1], config, secret=SECRET), tmp_path / "b1")
    names = sorted(p.name for p in (tmp_path / "b1").iterdir())
    assert names == ["bundle.json", "preprocess.json", "representation.pt"]
    text = (tmp_path / "b1" / "preprocess.json").read_text()
    assert "merchant_name" in text and "yearly_income" not in text  # the bank's column
    assert LABEL_COLUMN not in text


def test_given_a_method_without_mean_fusion_when_exporting_then_refused(tmp_path: Path) -> None:
    tables = write_tables(tmp_path / "data", n=120)
    sources = federation_sources(
        [tables["bank"], tables["retail"]],
        None,
        id_column="customer_id",
        label_column=LABEL_COLUMN,
        label_blocks=None,
    )
    config = TrainConfig(epochs=1, method="svfl", model=ModelConfig(embed_dim=4, hidden=(8,)))
    party = Party("party0", load_table_federation(sources)[0], config, secret=SECRET)
    with pytest.raises(ConfigError, match="cannot be served from bundles"):
        write_bundle(party, tmp_path / "b")


def test_given_a_broken_bundle_when_loading_then_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="not a serving bundle"):
        load_bundle(tmp_path)
    (tmp_path / META_FILE).write_text("{}")
    with pytest.raises(DataError, match="invalid bundle metadata"):
        load_bundle(tmp_path)


def test_given_a_table_when_rows_are_appended_then_refresh_serves_them(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("id,a,c\nu1,1,x\nu2,3,y\n")
    fitted = TabularPreprocessor.fit(read_table(path).select(["a", "c"]))
    table = FeatureTable(path, "id", fitted, SECRET)
    key = hash_ids(["u3"], SECRET)
    assert table.lookup(key)[0].tolist() == [False]
    with path.open("a") as f:
        f.write("u3,5,x\n")
    assert table.refresh()
    held, x = table.lookup(key)
    assert held.tolist() == [True] and x.shape == (1, fitted.width)
    np.testing.assert_array_equal(x, inline_features(fitted, {"a": 5, "c": "x"}))
    with path.open("a") as f:
        f.write("u4,five,x\n")  # a malformed row: the version before stays served
    assert not table.refresh() and "five" in (table.problem or "")
    assert table.lookup(key)[0].tolist() == [True]
    with pytest.raises(DataError, match="unknown feature columns"):
        inline_features(fitted, {"b": 1})
    # NaN as "" and inf are: refused naming the column; a column not given: named as missing
    for bad in (float("nan"), "NaN", float("inf"), "-inf"):
        with pytest.raises(DataError, match=r"column 'a': .* is not a finite number"):
            inline_features(fitted, {"a": bad, "c": "x"})
    with pytest.raises(DataError, match=r"columns \['a'\] are missing"):
        inline_features(fitted, {"c": "x"})


def test_given_an_end_checkpoint_when_exported_then_the_same_bundle_as_after_training(
    tmp_path: Path,
) -> None:
    tables = write_tables(tmp_path / "data", n=200, share=0.9)
    paths = [tables["bank"], tables["retail"]]
    _, parties = trained(paths, "customer_id", LABEL_COLUMN, "classification")
    saved = save_party_checkpoint(tmp_path / "ckpt", parties[0])
    write_bundle(parties[0], tmp_path / "direct")
    args = ["export", "--checkpoint", str(saved), "--data", str(paths[0]), "--out"]
    args += [str(tmp_path / "exported"), "--id-column", "customer_id", "--label-column"]
    args += [LABEL_COLUMN, "--block", "0", "--clients", "2"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    direct, exported = load_bundle(tmp_path / "direct"), load_bundle(tmp_path / "exported")
    assert direct.meta == exported.meta
    x = np.random.default_rng(0).normal(size=(7, *direct.meta.feature_shape)).astype(np.float32)
    np.testing.assert_array_equal(direct.embed(x), exported.embed(x))
    e = {0: direct.embed(x), 1: direct.embed(x)[::-1].copy()}
    np.testing.assert_array_equal(direct.predict(e), exported.predict(e))
    bad = CliRunner().invoke(app, [*args[:6], str(tmp_path / "x")])  # a table without options
    assert bad.exit_code != 0 and "--id-column" in bad.output


def test_given_a_row_appended_in_two_writes_when_refreshed_between_then_its_cut_cell_is_not_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stop 41's outsider pass: a serving party read its table between the two writes of one
    appended row and served the cut cell (`plus-pl` for `plus-plan`: another category, a wrong
    prediction without a word). The change now waits for the line's newline; a line left cut
    (its writer killed mid-row) is served after INCOMPLETE_GRACE_S, said in the log."""
    path = tmp_path / "t.csv"
    path.write_text("id,a,c\nu1,1,plus-plan\nu2,3,basic\n")
    fitted = TabularPreprocessor.fit(read_table(path).select(["a", "c"]))
    table = FeatureTable(path, "id", fitted, SECRET)
    key = hash_ids(["u3"], SECRET)
    with path.open("a") as f:
        f.write("u3,45")  # the first write of the row "u3,450.5,plus-plan"
    assert not table.refresh()  # (too few fields: refused on 935edf2 too)
    assert table.lookup(key)[0].tolist() == [False]
    with path.open("a") as f:
        f.write("0.5,plus-pl")
    assert not table.refresh()  # on 935edf2: True, u3 served with the category "plus-pl"
    with path.open("a") as f:
        f.write("an\n")
    assert table.refresh()
    held, x = table.lookup(key)
    assert held.tolist() == [True]
    np.testing.assert_array_equal(x, inline_features(fitted, {"a": 450.5, "c": "plus-plan"}))
    # a writer that stopped mid-row: the cut line is served once it has stayed so a while
    from vfl_core.serving import features

    monkeypatch.setattr(features, "INCOMPLETE_GRACE_S", 0.0)
    with path.open("a") as f:
        f.write("u4,7,bas")
    assert not table.refresh()  # first seen cut: waits
    assert table.refresh()  # still cut at the next look, past the grace: served as it is
    assert table.lookup(hash_ids(["u4"], SECRET))[0].tolist() == [True]
