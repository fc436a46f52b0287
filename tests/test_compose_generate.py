"""`vfl compose` (issue 29, item 5): compose files for any K, a GPU override that builds a CUDA
image, and the host user's ids. The checked-in files are its output for four parties."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness import BIN
from test_compose import ROOT, _available, argv, client_names, mounts, parse

from vfl_cli.compose_cmd import compose_text, env_text, gpu_override_text
from vfl_core.errors import ConfigError


def test_checked_in_files_are_the_generators_output_for_four_parties() -> None:
    assert (ROOT / "docker-compose.yml").read_text() == compose_text(4), "run `vfl compose`"
    assert (ROOT / "docker-compose.gpu.yml").read_text() == gpu_override_text(4)


@pytest.mark.parametrize("k", [1, 2, 6, 8])
def test_k_parties_are_wired_alike(k: int) -> None:
    services: dict[str, Any] = yaml.safe_load(compose_text(k))["services"]
    assert client_names(services) == sorted(f"client{b}" for b in range(k))
    assert parse(argv(services["prepare"]))[1]["clients"] == k
    assert parse(argv(services["coordinator"]))[1]["clients"] == k
    assert parse(argv(services["certs"]))[1]["parties"] == ",".join(f"party{b}" for b in range(k))
    for b in range(k):
        path, params = parse(argv(services[f"client{b}"]))
        assert path == "vfl-client" and params["block"] == b
        assert params["advertise"] == f"client{b}:50061"
        assert mounts(services[f"client{b}"]) == [
            (f"./data/quadrant{b}", "/data", True),
            (f"./certs/party{b}", "/certs", True),
        ]


def test_every_service_runs_as_the_user_the_image_is_built_for() -> None:
    compose: dict[str, Any] = yaml.safe_load(compose_text(3))
    image = compose["x-image"]
    assert image["user"] == "${VFL_UID:-1000}:${VFL_GID:-1000}"
    assert image["build"]["args"] == {"VFL_UID": "${VFL_UID:-1000}", "VFL_GID": "${VFL_GID:-1000}"}
    for name, service in compose["services"].items():
        assert service["user"] == image["user"], name  # merged from the anchor


def test_gpu_override_builds_a_cuda_image_for_the_clients_only() -> None:
    override: dict[str, Any] = yaml.safe_load(gpu_override_text(3))
    assert sorted(override["services"]) == ["client0", "client1", "client2"]
    for service in override["services"].values():
        assert service["image"] == "${VFL_IMAGE_CUDA:-laser-vfl:cuda}"
        args = service["build"]["args"]
        assert args["BASE"].startswith("nvidia/cuda:")  # not the CPU base under a cuda tag
        assert args["TORCH_INDEX"] == "https://pypi.org/simple"  # PyPI's Linux torch: CUDA
        devices = service["deploy"]["resources"]["reservations"]["devices"]
        assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]


@pytest.mark.parametrize("k", [0, 65])
def test_k_out_of_range_is_refused(k: int) -> None:
    with pytest.raises(ConfigError, match="--clients must be between 1 and 64"):
        compose_text(k)


def test_more_parties_than_digits_has_columns_are_refused_before_prepare_would() -> None:
    with pytest.raises(ConfigError, match=r"--clients 9: .* at most 8 parties"):
        compose_text(9)
    assert "client7:" in compose_text(8)


def test_command_writes_the_files_and_keeps_an_existing_env(tmp_path: Path) -> None:
    vfl = str(BIN / "vfl")
    done = subprocess.run([vfl, "compose", "--clients", "5", "--out", str(tmp_path)], timeout=60)
    assert done.returncode == 0
    assert (tmp_path / "docker-compose.yml").read_text() == compose_text(5)
    assert (tmp_path / "docker-compose.gpu.yml").read_text() == gpu_override_text(5)
    assert (tmp_path / ".env").read_text() == env_text(os.getuid(), os.getgid())
    (tmp_path / ".env").write_text("VFL_UID=4242\n")
    subprocess.run(
        [vfl, "compose", "--clients", "5", "--out", str(tmp_path)], timeout=60, check=True
    )
    assert (tmp_path / ".env").read_text() == "VFL_UID=4242\n"  # the user's own, kept


@pytest.mark.parametrize("k", [2, 6])
def test_compose_config_accepts_the_generated_files_merged(tmp_path: Path, k: int) -> None:
    reason = _available(["docker-compose"])
    if reason is not None:
        pytest.skip(reason)
    (tmp_path / "docker-compose.yml").write_text(compose_text(k))
    (tmp_path / "docker-compose.gpu.yml").write_text(gpu_override_text(k))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPOSE_", "VFL_"))}
    files = ["-f", "docker-compose.yml", "-f", "docker-compose.gpu.yml"]
    result = subprocess.run(
        ["docker-compose", *files, "config"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    merged = yaml.safe_load(result.stdout)["services"]
    assert merged["client0"]["image"] == "laser-vfl:cuda"
    assert merged["coordinator"]["image"] == "laser-vfl:latest"
    assert merged["client0"]["build"]["args"]["BASE"].startswith("nvidia/cuda:")


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to hand a key to another uid")
def test_key_of_another_uid_is_refused_with_the_compose_fix() -> None:
    """Where a compose user with another uid than the image's meets it: a party's key of mode
    0600 owned by someone else. The one line says whose it is and what to set."""
    script = (
        "import os, sys; from vfl_wire.security import load_identity\n"
        "os.setgid(4321); os.setuid(4321)\n"
        "try:\n    load_identity(sys.argv[1], 'party0', need_token=True)\n"
        "except Exception as err:\n    print(err)\n"
    )
    base = Path(tempfile.mkdtemp(prefix="vfl-uid-"))  # /tmp/pytest-of-root is 0700
    try:
        base.chmod(0o755)
        certs = base / "certs"
        argv = [str(BIN / "vfl"), "certs", "--out", str(certs), "--parties", "party0"]
        subprocess.run(argv, check=True, capture_output=True, timeout=120)
        for path in (certs, certs / "party0"):
            path.chmod(0o755)
        done = subprocess.run(
            [str(BIN / "python"), "-c", script, str(certs)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        shutil.rmtree(base)
    assert "Permission denied (owned by uid 0" in done.stdout, done.stdout + done.stderr
    assert "this process runs as uid 4321" in done.stdout and "VFL_UID" in done.stdout
