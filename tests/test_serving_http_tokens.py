"""Bearer tokens for the gateway's HTTP endpoint, minted by `vfl certs` (issue 46): each HTTP
caller gets `<caller>/http-token`, each party's directory only the tokens' SHA-256 digests
(`http-tokens.json`), and a gateway started with `--http-auth token` (real processes) accepts a
caller's token and refuses a wrong one, the caller's gRPC token included."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from tabular_tables import LABEL_COLUMN, write_tables
from test_serving_http_stack import request
from typer.testing import CliRunner

from benchmarks.serve.cluster import ServingCluster, train_bundles
from vfl_cli.app import app
from vfl_core.config import TrainConfig
from vfl_core.model.model_config import ModelConfig
from vfl_wire.security import token_digest

ID = "customer_id"


def mint(out: Path, *extra: str) -> None:
    result = CliRunner().invoke(
        app, ["certs", "--out", str(out), "--parties", "party0,party1", *extra]
    )
    assert result.exit_code == 0, result.output


def test_given_vfl_certs_when_run_then_each_http_caller_has_a_token_and_parties_only_digests(
    tmp_path: Path,
) -> None:
    out = tmp_path / "certs"
    mint(out, "--http-callers", "operator,frontend")
    tokens = {c: (out / c / "http-token").read_bytes() for c in ("operator", "frontend")}
    for caller, token in tokens.items():
        assert len(token.strip()) >= 40
        assert stat.S_IMODE((out / caller / "http-token").stat().st_mode) == 0o600
        assert token != (out / "operator" / "token").read_bytes()  # not the gRPC token
    for party in ("party0", "party1"):
        digests = json.loads((out / party / "http-tokens.json").read_text())
        assert digests == {c: token_digest(t) for c, t in tokens.items()}
        held = b"".join(p.read_bytes() for p in (out / party).iterdir() if p.is_file())
        assert not any(t.strip() in held for t in tokens.values())
    mint(out)  # again: the tokens are kept
    assert (out / "frontend" / "http-token").read_bytes() == tokens["frontend"]


def test_given_a_bad_http_caller_name_when_certs_then_one_line_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["certs", "--out", str(tmp_path / "c"), "--parties", "party0", "--http-callers", "party0"],
    )
    assert result.exit_code != 0
    assert "--http-callers: 'party0' is the coordinator or a party" in result.output
    assert "Traceback" not in result.output


@pytest.mark.slow
def test_given_certs_tokens_when_gateway_uses_token_auth_then_right_token_only(
    tmp_path: Path,
) -> None:
    certs = tmp_path / "certs"
    mint(certs)
    paths = write_tables(tmp_path / "data", n=200, share=0.9)
    tables = [paths["bank"], paths["retail"]]
    config = TrainConfig(epochs=1, model=ModelConfig(embed_dim=4, hidden=(8,)))
    bundles, _, _ = train_bundles(
        tables, tmp_path / "bundles", id_column=ID, label_column=LABEL_COLUMN, config=config
    )
    token = (certs / "operator" / "http-token").read_text().strip()
    grpc_token = (certs / "operator" / "token").read_text().strip()
    with ServingCluster(tmp_path / "procs") as cluster:
        party = cluster.start_party("party1", bundles[1], tables[1], ID)
        # party0's directory holds the digests only; --insecure: plaintext gRPC and HTTP
        extra = ["--tls-dir", str(certs), "--http-auth", "token", "--deadline-ms", "2000"]
        gateway = cluster.start_gateway(
            "party0", bundles[0], tables[0], ID, [f"1=127.0.0.1:{party.port}"], extra
        )
        status, _, body = request(gateway.http_port, "GET", "/predict?id=C00001", token=token)
        assert status == 200, body
        assert json.loads(body)["predictions"][0]["id"] == "C00001"
        for wrong in (grpc_token, token[:-1], None):
            status, headers, body = request(
                gateway.http_port, "GET", "/predict?id=C00001", token=wrong
            )
            assert status == 401 and "unauthenticated" in json.loads(body)["error"]
            assert headers["www-authenticate"] == "Bearer"
