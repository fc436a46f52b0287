"""The CLI explains itself: every command's help shows each option's default, options have one
name per idea across commands (old spellings accepted with a notice), config files set any option
and refuse unknown keys, and `--help` imports none of the heavy modules.

The help tests walk the real typer apps: `vfl` with every command and sub-command, and the
`vfl-client` and `vfl-coordinator` console scripts.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
import typer.main
import yaml
from typer.core import TyperOption
from typer.testing import CliRunner

from vfl_cli import client_cmd, coordinator_cmd, defaults, defaults_source
from vfl_cli.app import app
from vfl_cli.command import VflCommand, respell, single
from vfl_cli.option_names import DEPRECATED, PANELS, SYNONYMS

# Options whose absence means "not given" (off, required where the command needs it, or read
# from elsewhere): they have no default to show. Any other option must show one.
NO_DEFAULT = {
    "--config", "--data-path", "--data", "--id-column", "--label-column", "--clients",
    "--num-classes", "--block", "--missing", "--missing-test", "--ids", "--ids-file", "--out",
    "--label-names", "--port-file", "--checkpoint-dir", "--hosts", "--parties", "--identity",
    "--server-name", "--p-miss-per-party", "--preprocessing", "--epochs", "--metric",
    "--run-dir", "--checkpoint", "--tables", "--bandwidths",
}  # fmt: skip


def commands() -> Iterator[tuple[str, Any]]:
    """(how it is called, the click command) of every command the user can run."""

    def leaves(called: str, command: Any) -> Iterator[tuple[str, Any]]:
        subcommands = getattr(command, "commands", None)
        if not subcommands:
            yield called, command
        for sub, child in (subcommands or {}).items():  # groups nest: `vfl bench paper accuracy`
            yield from leaves(f"{called} {sub}", child)

    yield from leaves("vfl", typer.main.get_command(app))
    yield "vfl-client", typer.main.get_command(single(client_cmd.client))
    yield "vfl-coordinator", typer.main.get_command(single(coordinator_cmd.coordinator))


def options(command: Any) -> list[TyperOption]:
    return [p for p in command.params if isinstance(p, TyperOption)]


def help_text(called: str) -> str:
    words = called.split()
    if words[0] == "vfl":
        result = CliRunner().invoke(app, [*words[1:], "--help"], terminal_width=80)
    else:
        fn = client_cmd.client if words[0] == "vfl-client" else coordinator_cmd.coordinator
        result = CliRunner().invoke(single(fn), ["--help"], terminal_width=80)
    assert result.exit_code == 0, result.output
    return result.output


def test_given_the_models_when_read_now_then_the_defaults_snapshot_matches_them() -> None:
    tables = defaults_source.current()
    assert {name: getattr(defaults, name) for name in tables} == tables, (
        "run `python -m vfl_cli.defaults_source && ruff format vfl_cli/defaults.py`"
    )


@pytest.mark.parametrize("called", [c for c, _ in commands()])
def test_given_any_command_when_its_help_is_shown_then_each_option_with_a_default_shows_it(
    called: str,
) -> None:
    command = dict(commands())[called]
    assert isinstance(command, VflCommand)
    shown = [
        o
        for o in options(command)
        if not o.required and (o.default not in (None, "") or isinstance(o.show_default, str))
    ]
    missing = [o.opts[0] for o in options(command) if o not in shown and o.opts[0] != "--help"]
    assert set(missing) <= NO_DEFAULT, f"{called}: options without a default shown: {missing}"
    text = help_text(called)
    assert text.count("[default:") == len(shown), text
    assert "<bool>" not in text and "…" not in "\n".join(
        line.split("│")[1][:26] for line in text.splitlines() if line.startswith("│ --")
    ), text  # no type after a flag; no option name cut short at 80 columns
    for option in options(command):
        assert f" {option.opts[0]} " in text or f" {option.opts[0]}\n" in text, option.opts[0]
        if option.opts[0] != "--help":
            assert option.help, f"{called} {option.opts[0]}: no help line"


def test_given_every_command_when_its_options_are_listed_then_one_idea_has_one_name() -> None:
    names = {c: {n for o in options(cmd) for n in o.opts} for c, cmd in commands()}
    every = set().union(*names.values())
    # a deprecated spelling names no option: it is rewritten to its replacement
    assert not every & set(DEPRECATED), every & set(DEPRECATED)
    for old, (new, had) in DEPRECATED.items():
        owners = [c for c in names if c.split()[-1] in had]
        assert owners, f"{old}: no command {had}"
        for called in owners:
            assert new in names[called], f"{called}: {old} would be rewritten to a missing {new}"
    for spellings in SYNONYMS:
        used = every & set(spellings[1:])
        assert not used, f"{sorted(used)}: spell it {spellings[0]}"
    # every option but the benchmarks' sweeps has its panel, so a new name is placed with its
    # idea's other options
    unplaced = {
        n.removeprefix("--")
        for c, opts in names.items()
        if not c.startswith("vfl bench")
        for n in opts
        if n not in ("--help", "--config")
    } - set(PANELS)
    assert not unplaced, f"options in no help panel: {sorted(unplaced)}"


def test_given_an_old_spelling_when_parsed_then_rewritten_with_one_line_on_stderr() -> None:
    names = {"--data", "--test-data", "--out"}
    args = ["--csv", "a.csv", "--test-csv=t.csv", "--out", "o", "--", "--csv"]
    assert respell("simulate", names, args) == [
        "--data", "a.csv", "--test-data=t.csv", "--out", "o", "--", "--csv",
    ]  # fmt: skip
    assert respell("demo", names, ["--csv", "a"]) == ["--csv", "a"]  # not one of its spellings

    seen: list[tuple[Path, ...]] = []
    demo = typer.Typer()

    @demo.command("simulate", cls=VflCommand)
    def simulate(data: list[Path] | None = None, other: int = 0) -> None:
        seen.append(tuple(data or ()))

    result = CliRunner().invoke(demo, ["--csv", "a.csv", "--csv", "b.csv"])
    assert result.exit_code == 0, result.output
    assert seen == [(Path("a.csv"), Path("b.csv"))]
    notice = "warning: --csv is deprecated, use --data (accepted until release 0.3)"
    assert result.stderr.splitlines() == [notice, notice]


# ------------------------------------------------------------------------ config files
def configured(monkeypatch: pytest.MonkeyPatch, module: Any, args: list[str]) -> Any:
    """Run `vfl-client`/`vfl-coordinator` on `args` with run_* faked: (result, config seen)."""
    seen: list[Any] = []
    if module is client_cmd:
        monkeypatch.setattr(client_cmd, "run_client", lambda cfg: seen.append(cfg) or "done")
        command = single(client_cmd.client)
    else:
        done = {"run_id": "r", "rounds": 0}
        monkeypatch.setattr(
            coordinator_cmd, "run_coordinator", lambda cfg, **_: seen.append(cfg) or done
        )
        command = single(coordinator_cmd.coordinator)
    result = CliRunner().invoke(command, args)
    return result, (seen[0] if seen else None)


def write_yaml(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def test_given_a_client_yaml_with_table_keys_when_started_then_they_describe_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = tmp_path / "bank.csv"
    table.write_text("customer,age,defaulted\nc1,30,0\nc2,40,1\n")
    keys = {"data": str(table), "block": 0, "id_column": "customer", "clients": 2}
    keys |= {"label_column": "defaulted", "features": ["age"], "test_fraction": 0.5}
    config = write_yaml(tmp_path / "client.yaml", keys)
    result, cfg = configured(monkeypatch, client_cmd, ["--config", str(config), "--insecure"])
    assert result.exit_code == 0, result.output
    source = cfg.table
    assert (source.id_column, source.label_column, source.features) == (
        "customer", "defaulted", ("age",),
    )  # fmt: skip
    assert (source.num_blocks, source.test_fraction, source.block) == (2, 0.5, 0)
    # a flag given beats the file's key
    args = ["--config", str(config), "--insecure", "--test-fraction", "0.25"]
    result, cfg = configured(monkeypatch, client_cmd, args)
    assert result.exit_code == 0 and cfg.table.test_fraction == 0.25, result.output


@pytest.mark.parametrize(
    ("module", "known"),
    [(client_cmd, "id_column"), (coordinator_cmd, "register_timeout_s")],
)
def test_given_a_yaml_with_an_unknown_key_when_started_then_one_line_names_it_and_the_known(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: Any, known: str
) -> None:
    config = write_yaml(tmp_path / "c.yaml", {"data": str(tmp_path), "id_colum": "customer"})
    if module is coordinator_cmd:
        config = write_yaml(tmp_path / "c.yaml", {"clients": 3, "epoch": 2})
    result, cfg = configured(monkeypatch, module, ["--config", str(config)])
    assert result.exit_code == 2 and cfg is None
    (line,) = result.output.strip().splitlines()
    bad = "id_colum" if module is client_cmd else "epoch"
    assert line.startswith(f"error: config {config}: unknown key {bad!r} (known keys: ")
    assert known in line


def test_given_a_coordinator_yaml_with_an_unknown_train_key_then_the_file_key_and_known_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write_yaml(tmp_path / "c.yaml", {"clients": 3, "train": {"epoch": 2}})
    result, cfg = configured(monkeypatch, coordinator_cmd, ["--config", str(config)])
    assert result.exit_code == 2 and cfg is None
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"error: config {config}: unknown key 'epoch' in train: (known keys: ")
    assert "epochs" in line and "early_stop_patience" in line and "Extra inputs" not in line
    config = write_yaml(tmp_path / "c.yaml", {"clients": 3, "train": [1, 2]})
    result, cfg = configured(monkeypatch, coordinator_cmd, ["--config", str(config)])
    assert result.output.strip() == f"error: config {config}: train: must hold a mapping, not list"


def test_given_a_simulate_yaml_with_an_unknown_key_when_run_then_refused_naming_it(
    tmp_path: Path,
) -> None:
    config = write_yaml(tmp_path / "s.yaml", {"epochs": 1, "p_mis": 0.1})
    result = CliRunner().invoke(app, ["simulate", "--config", str(config)])
    assert result.exit_code == 2
    assert result.output.startswith(f"error: config {config}: unknown key 'p_mis' (known keys: ")
    assert "p_miss" in result.output and "dataset" in result.output


# ------------------------------------------------------------------------ start-up
@pytest.mark.parametrize("module", ["vfl_cli.app", "vfl_cli.client_cmd", "vfl_cli.coordinator_cmd"])
def test_given_a_console_script_when_asked_for_help_then_no_heavy_module_is_imported(
    module: str,
) -> None:
    code = (
        "import sys\n"
        f"from {module} import main\n"
        "sys.argv = ['x', '--help']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = ('torch', 'grpc', 'sklearn', 'numpy', 'matplotlib')\n"
        "print('imported:', sorted(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert out.strip().splitlines()[-1] == "imported: []", out[-2000:]
