"""docker-compose.yml against the real CLIs: every service's command parses, each party sees only
its own quadrant, and the wiring (ports, names, counts) agrees across services.

Commands are parsed with click's `make_context` on the commands typer builds from our apps, so an
option renamed in a CLI fails here; nothing is executed.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import typer
import typer.main
import yaml

from vfl_cli.app import app as vfl_app
from vfl_cli.client_cmd import client as client_fn
from vfl_cli.coordinator_cmd import coordinator as coordinator_fn
from vfl_wire.channels import FEW_OPEN_FILES

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_FILE = ROOT / "docker-compose.yml"
CLIENT_NAME = re.compile(r"client(\d+)")
K = 4


def _single(fn: Callable[..., Any]) -> Any:
    """The click command `typer.run(fn)` would run."""
    app = typer.Typer()
    app.command()(fn)
    return typer.main.get_command(app)


CLIS: dict[str, Any] = {
    "vfl": typer.main.get_command(vfl_app),
    "vfl-client": _single(client_fn),
    "vfl-coordinator": _single(coordinator_fn),
}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text())


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def argv(service: dict[str, Any]) -> list[str]:
    command = service["command"]
    if isinstance(command, str):
        return shlex.split(command)
    assert all(isinstance(a, str) for a in command), f"non-string argument in {command}"
    return list(command)


def parse(args: list[str]) -> tuple[str, dict[str, Any]]:
    """Parse `args` (program first) with the real CLI; returns (command path, parameters)."""
    program, rest = args[0], args[1:]
    assert program in CLIS, f"unknown program {program!r}"
    command = CLIS[program]
    ctx = command.make_context(program, list(rest))
    path = program
    while hasattr(command, "resolve_command"):  # a group: descend into the subcommand
        remaining = [*getattr(ctx, "_protected_args", []), *ctx.args]
        assert remaining, f"{args}: no subcommand"
        name, command, sub_args = command.resolve_command(ctx, remaining)
        ctx = command.make_context(name, sub_args, parent=ctx)
        path = f"{path} {name}"
    return path, ctx.params


def client_names(services: dict[str, Any]) -> list[str]:
    return sorted(n for n in services if CLIENT_NAME.fullmatch(n))


def mounts(service: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(source, target, read_only) of each volume, short or long syntax."""
    result = []
    for volume in service.get("volumes", []):
        if isinstance(volume, str):
            source, target, *mode = volume.split(":")
            result.append((source, target, "ro" in (mode[0].split(",") if mode else [])))
        else:
            result.append((volume["source"], volume["target"], bool(volume.get("read_only"))))
    return result


def port(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


# ---------------------------------------------------------------------------------- topology
def test_four_clients_numbered_from_zero(services: dict[str, Any]) -> None:
    assert client_names(services) == [f"client{k}" for k in range(K)]
    assert {"prepare", "certs", "coordinator"} <= services.keys()


@pytest.mark.parametrize("k", range(K))
def test_client_mounts_only_its_own_quadrant(services: dict[str, Any], k: int) -> None:
    assert mounts(services[f"client{k}"]) == [
        (f"./data/quadrant{k}", "/data", True),
        (f"./certs/party{k}", "/certs", True),  # and its own certificate, key and token
    ]


def test_coordinator_sees_no_data(services: dict[str, Any]) -> None:
    sources = [PurePosixPath(s) for s, _, _ in mounts(services["coordinator"])]
    assert not [s for s in sources if s.parts[:2] == (".", "data") or s.parts[:1] == ("data",)]


def test_prepare_writes_the_directories_the_clients_mount(services: dict[str, Any]) -> None:
    path, params = parse(argv(services["prepare"]))
    assert path == "vfl prepare"
    assert params["clients"] == K
    (source, target, read_only), *others = mounts(services["prepare"])
    assert not others and not read_only
    assert params["out"] == Path(target)
    for k in range(K):
        (client_source, _, _), *_ = mounts(services[f"client{k}"])
        assert client_source == f"{source}/{params['prefix']}{k}"


def test_clients_start_after_prepare_succeeded(services: dict[str, Any]) -> None:
    assert services["prepare"].get("restart") == "no"
    for name in client_names(services):
        depends = services[name]["depends_on"]
        assert depends["prepare"] == {"condition": "service_completed_successfully"}
        assert "coordinator" in depends


def test_all_services_share_one_network(services: dict[str, Any]) -> None:
    networks = {name: tuple(s.get("networks", ())) for name, s in services.items()}
    assert len(set(networks.values())) == 1, networks
    assert next(iter(networks.values())), "no network named"


# ---------------------------------------------------------------------------------- commands
@pytest.mark.parametrize(
    "name", ["prepare", "certs", "coordinator", *(f"client{k}" for k in range(K))]
)
def test_command_parses_against_the_real_cli(services: dict[str, Any], name: str) -> None:
    path, params = parse(argv(services[name]))
    assert params, f"{name}: {path} parsed to nothing"


def test_coordinator_command(services: dict[str, Any]) -> None:
    path, params = parse(argv(services["coordinator"]))
    assert path == "vfl-coordinator"
    assert params["clients"] == len(client_names(services))
    assert params["serve"] is True
    assert params["out"] == Path("/runs")
    assert ("runs", "/runs", False) in mounts(services["coordinator"])
    published = [p.rsplit(":", 1)[1] for p in services["coordinator"]["ports"]]
    assert str(port(params["listen"])) in published


@pytest.mark.parametrize("k", range(K))
def test_client_command_wiring(services: dict[str, Any], k: int) -> None:
    path, params = parse(argv(services[f"client{k}"]))
    _, coordinator = parse(argv(services["coordinator"]))
    assert path == "vfl-client"
    assert params["block"] == k
    assert params["data"] == Path("/data")
    assert params["coordinator"] == f"coordinator:{port(coordinator['listen'])}"
    assert params["advertise"] == f"client{k}:{port(params['listen'])}"


# ---------------------------------------------------------------------------------- security
def test_certs_service_makes_an_identity_for_every_party_the_clients_mount(
    services: dict[str, Any],
) -> None:
    path, params = parse(argv(services["certs"]))
    assert path == "vfl certs"
    assert services["certs"].get("restart") == "no"
    [(source, target, read_only)] = mounts(services["certs"])
    assert not read_only and params["out"] == Path(target)
    parties = params["parties"].split(",")
    assert parties == [f"party{k}" for k in range(K)]
    assert ("./certs/coordinator", "/certs", True) in mounts(services["coordinator"])
    for k in range(K):
        assert (f"{source}/party{k}", "/certs", True) in mounts(services[f"client{k}"])


@pytest.mark.parametrize("name", ["coordinator", *(f"client{k}" for k in range(K))])
def test_servers_run_mutual_tls_with_their_own_identity_only(
    services: dict[str, Any], name: str
) -> None:
    service = services[name]
    _, params = parse(argv(service))
    assert params["insecure"] is False
    assert params["tls_dir"] == Path("/certs")
    certs = [m for m in mounts(service) if m[1] == "/certs"]
    assert len(certs) == 1 and certs[0][2], f"{name}: /certs must be one read-only mount"
    assert certs[0][0].startswith("./certs/"), "never the whole ./certs (the CA key is there)"
    assert service["depends_on"]["certs"] == {"condition": "service_completed_successfully"}
    assert service["environment"]["VFL_TLS_DIR"] == "/certs"  # for the health check


def test_coordinator_admits_the_certified_parties_and_aligns_by_psi(
    services: dict[str, Any],
) -> None:
    _, params = parse(argv(services["coordinator"]))
    assert params["parties"] is None  # default: every party `vfl certs` gave a token
    assert params["alignment"] == "psi"
    for k in range(K):  # the parties align the same way (and so never send ID hashes)
        assert parse(argv(services[f"client{k}"]))[1]["alignment"] == "psi"


@pytest.mark.parametrize("name", ["coordinator", *(f"client{k}" for k in range(K))])
def test_health_check_runs_vfl_health_over_tls(services: dict[str, Any], name: str) -> None:
    test = services[name]["healthcheck"]["test"]
    assert test[0] == "CMD"
    path, params = parse(test[1:])
    assert path == "vfl health" and params["insecure"] is False
    _, command = parse(argv(services[name]))
    listen_port = port(command["listen"])
    assert port(services[name]["environment"]["VFL_HEALTH_ADDR"]) == listen_port


def test_a_wrong_option_is_caught() -> None:
    """The check above is real: make_context refuses unknown options and bad values."""
    with pytest.raises(Exception, match="No such option"):
        parse(["vfl-client", "--data", "/data", "--no-such-option", "1"])
    with pytest.raises(Exception, match="integer"):
        parse(["vfl-client", "--data", "/data", "--block", "two"])
    with pytest.raises(Exception, match="No such command"):
        parse(["vfl", "no-such", "--out", "/data"])


def test_readme_evaluate_command_parses() -> None:
    """docs/deployment.md tells users to run `vfl evaluate --coordinator localhost:50051
    --tls-dir certs` (as the operator, over mutual TLS)."""
    group = CLIS["vfl"]
    ctx = group.make_context("vfl", ["evaluate"])
    if group.get_command(ctx, "evaluate") is None:
        pytest.skip("`vfl evaluate` is not part of the vfl app yet")
    command = "vfl evaluate --coordinator localhost:50051 --tls-dir certs"
    assert command in (ROOT / "docs" / "deployment.md").read_text()
    path, params = parse(command.split())
    assert path == "vfl evaluate" and params["coordinator"] == "localhost:50051"
    assert params["tls_dir"] == Path("certs") and params["insecure"] is False


# ---------------------------------------------------------------------------------- compose
def _compose_binaries() -> list[Any]:
    return [
        pytest.param(["docker-compose"], id="docker-compose-v1"),
        pytest.param(["docker", "compose"], id="docker-compose-v2"),
    ]


def _available(binary: list[str]) -> str | None:
    """None if `binary` can run `config`, else why not."""
    if shutil.which(binary[0]) is None:
        return (
            f"`{binary[0]}` is not on PATH (install Debian's docker-compose; see .ci/compose-check)"
        )
    probe = subprocess.run([*binary, "version"], capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        output = (probe.stderr or probe.stdout).strip().splitlines()
        return f"`{' '.join(binary)} version` failed: {output[0] if output else probe.returncode}"
    return None


@pytest.mark.parametrize("binary", _compose_binaries())
def test_compose_config_accepts_the_file(binary: list[str]) -> None:
    reason = _available(binary)
    if reason is not None:
        pytest.skip(reason)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPOSE_", "VFL_"))}
    result = subprocess.run(
        [*binary, "-f", str(COMPOSE_FILE), "config", "-q"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr or result.stdout


def test_servers_may_hold_many_connections(services: dict[str, Any]) -> None:
    for name in ["coordinator", *client_names(services)]:
        nofile = services[name]["ulimits"]["nofile"]
        assert min(nofile["soft"], nofile["hard"]) >= FEW_OPEN_FILES, name
