"""`vfl-coordinator --config` and `vfl-client --config`: a flag given on the command line beats
the file's key, the file's key beats the default, and the defaults are the config models'.

The slow tests start the real console scripts (a coordinator that waits for parties, a client
that looks for its coordinator) and read what they log; the others parse real command lines in
this process and look at the config the command hands to `run_*`.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from harness import BIN
from typer.testing import CliRunner

from vfl_cli import client_cmd, coordinator_cmd
from vfl_client.runner import ClientConfig
from vfl_coordinator.config import CoordinatorConfig, Deadlines
from vfl_core.training.faults import FaultConfig

LOG_WAIT_S = 90.0  # a loaded 2-core machine needs seconds to import torch


def closed_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def started(tmp_path: Path) -> Iterator[Any]:
    """Start a console script with its stderr in a file; every process is stopped at the end."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(argv: list[str]) -> Path:
        log = tmp_path / f"proc{len(procs)}.log"
        with log.open("wb") as err:
            procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err))
        return log

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_for(log: Path, text: str) -> str:
    deadline = time.monotonic() + LOG_WAIT_S
    while time.monotonic() < deadline:
        content = log.read_text()
        if text in content:
            return content
        time.sleep(0.1)
    raise AssertionError(f"{text!r} not logged within {LOG_WAIT_S}s:\n{log.read_text()}")


def write_yaml(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


# ------------------------------------------------------------------------- real processes
@pytest.mark.slow
def test_given_a_config_file_and_a_flag_when_the_coordinator_starts_then_the_flag_wins(
    tmp_path: Path, started: Any
) -> None:
    config = write_yaml(
        tmp_path / "coordinator.yaml",
        {"clients": 5, "run_id": "from-file", "listen": "127.0.0.1:0", "insecure": True},
    )
    argv = [str(BIN / "vfl-coordinator"), "--config", str(config), "--clients", "2"]
    log = started([*argv, "--out", str(tmp_path / "out"), "--no-progress"])
    content = wait_for(log, "waiting for")
    # --clients beats the file's clients; the file's run_id and listen hold where no flag is given
    assert "coordinator run from-file listening on port" in content
    assert "waiting for 2 parties" in content


@pytest.mark.slow
def test_given_a_config_file_and_a_flag_when_the_client_starts_then_the_flag_wins(
    tmp_path: Path, party_dirs: list[Path], started: Any
) -> None:
    from_file, from_flag = closed_port(), closed_port()
    config = write_yaml(
        tmp_path / "client.yaml",
        {
            "data": str(party_dirs[0]),
            "coordinator": f"127.0.0.1:{from_file}",
            "listen": "127.0.0.1:0",
            "insecure": True,
            "register_timeout_s": 60,
        },
    )
    argv = [str(BIN / "vfl-client"), "--config", str(config)]
    log = started([*argv, "--coordinator", f"127.0.0.1:{from_flag}"])
    content = wait_for(log, "not reachable yet")
    assert f"coordinator at 127.0.0.1:{from_flag} not reachable yet" in content
    assert f"127.0.0.1:{from_file}" not in content


# ------------------------------------------------------------------------- parsed in-process
def invoke(monkeypatch: pytest.MonkeyPatch, module: Any, args: list[str]) -> Any:
    """Run the real command of `module` (client_cmd or coordinator_cmd) on `args`; returns the
    config it passed to run_client / run_coordinator (faked: nothing starts)."""
    seen: list[Any] = []
    if module is client_cmd:
        command = client_cmd.client
        monkeypatch.setattr(client_cmd, "run_client", lambda cfg: seen.append(cfg) or "done")
    else:
        command = coordinator_cmd.coordinator
        results = {"run_id": "r", "rounds": 0}
        monkeypatch.setattr(
            coordinator_cmd, "run_coordinator", lambda cfg, **_: seen.append(cfg) or results
        )
    app = typer.Typer()
    app.command()(command)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    (cfg,) = seen
    return cfg


def test_given_no_file_and_no_flags_when_parsed_then_the_configs_are_the_models_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VFL_TLS_DIR", raising=False)
    monkeypatch.delenv("VFL_SECRET", raising=False)
    cfg = invoke(monkeypatch, coordinator_cmd, [])
    assert cfg == CoordinatorConfig()
    cfg = invoke(monkeypatch, client_cmd, ["--data", str(tmp_path)])
    assert cfg == ClientConfig(data=tmp_path)


def test_given_pause_probe_flag_or_key_when_parsed_then_the_engine_probes_that_often(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert invoke(monkeypatch, coordinator_cmd, []).pause_probe_s == 5.0
    assert invoke(monkeypatch, coordinator_cmd, ["--pause-probe", "1.5"]).pause_probe_s == 1.5
    config = write_yaml(tmp_path / "c.yaml", {"pause_probe_s": 2})
    assert invoke(monkeypatch, coordinator_cmd, ["--config", str(config)]).pause_probe_s == 2.0
    started: list[object] = []
    monkeypatch.setattr(coordinator_cmd, "run_coordinator", lambda cfg, **_: started.append(cfg))
    app = typer.Typer()
    app.command()(coordinator_cmd.coordinator)
    result = CliRunner().invoke(app, ["--pause-probe", "0"])
    assert result.exit_code == 2 and not started, result.output
    assert "pause_probe" in result.output, result.output


def test_given_file_keys_when_no_flag_is_given_then_they_beat_the_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write_yaml(
        tmp_path / "c.yaml",
        {"max_inflight": 3, "deadlines": {"embed": 2.5}, "train": {"epochs": 7}},
    )
    cfg = invoke(monkeypatch, coordinator_cmd, ["--config", str(config)])
    assert (cfg.max_inflight, cfg.deadlines, cfg.train.epochs) == (3, Deadlines(embed=2.5), 7)


def test_given_a_deadline_flag_and_file_deadlines_when_parsed_then_they_merge_phase_by_phase(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write_yaml(tmp_path / "c.yaml", {"deadlines": {"embed": 2.0, "align": 120.0}})
    args = ["--config", str(config), "--deadline", "7", "--epochs", "3"]
    cfg = invoke(monkeypatch, coordinator_cmd, args)
    phases = {"embed": 7.0, "fuse": 7.0, "backward": 7.0, "predict": 7.0, "checkpoint": 7.0}
    assert cfg.deadlines == Deadlines(align=120.0, **phases)
    assert cfg.train.epochs == 3


def test_given_file_faults_and_a_fault_flag_when_parsed_then_the_flag_overrides_only_its_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write_yaml(tmp_path / "c.yaml", {"faults": {"fail_rate": 0.1, "rejoin_rate": 0.5}})
    args = ["--config", str(config), "--fault-rate", "0.3", "--link-loss", "0.2"]
    cfg = invoke(monkeypatch, coordinator_cmd, args)
    assert cfg.faults == FaultConfig(fail_rate=0.3, rejoin_rate=0.5, link_loss=0.2)


def test_given_an_environment_variable_and_a_file_key_when_parsed_then_the_variable_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write_yaml(
        tmp_path / "p.yaml", {"data": str(tmp_path), "secret": "from-file", "threads": 2}
    )
    monkeypatch.setenv("VFL_SECRET", "from-env")
    cfg = invoke(monkeypatch, client_cmd, ["--config", str(config)])
    assert (cfg.secret, cfg.threads, cfg.data) == ("from-env", 2, tmp_path)


@pytest.mark.slow
def test_given_no_data_anywhere_when_the_client_starts_then_one_line_names_the_option(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "VFL_SECRET"}
    config = write_yaml(tmp_path / "p.yaml", {"insecure": True})
    proc = subprocess.run(
        [str(BIN / "vfl-client"), "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: no party data: give --data (or `data:` in --config)"
