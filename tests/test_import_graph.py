"""scripts/import_graph.py: the measure of issue 28's import circles (tests/test_layering.py
asserts the layering with it; this pins that the measure itself is right)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("import_graph", ROOT / "scripts" / "import_graph.py")
assert spec is not None and spec.loader is not None
import_graph = importlib.util.module_from_spec(spec)
spec.loader.exec_module(import_graph)


def test_given_a_toy_graph_when_searched_then_each_circle_once_and_no_lone_module() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}, "f": set()}
    assert import_graph.cycles(edges) == [["a", "b", "c"]]


def test_given_type_checking_imports_when_runtime_only_then_left_out(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "from vfl_core.errors import VflError\n"
        "if TYPE_CHECKING:\n    from vfl_core.config import TrainConfig\n"
        "def f():\n    from vfl_core.seeding import rng\n"
    )
    known = {"vfl_core.errors": source, "vfl_core.config": source, "vfl_core.seeding": source}
    every = {m for m, _ in import_graph.imports("vfl_core.m", source, known)}
    runtime = {m for m, _ in import_graph.imports("vfl_core.m", source, known, typing_too=False)}
    assert every == {"vfl_core.errors", "vfl_core.config", "vfl_core.seeding"}
    assert runtime == {"vfl_core.errors", "vfl_core.seeding"}


def test_given_the_repository_when_counted_then_one_line_of_counts() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "import_graph.py"), "--counts"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "modules;" in done.stdout and "cycle(s) holding" in done.stdout
    # issue 48: no circle in vfl_core, the imports under `if TYPE_CHECKING:` included
    assert " 0 cycle(s) holding 0 modules;" in done.stdout, done.stdout


def test_given_the_repository_when_every_import_is_followed_then_vfl_core_has_no_cycle() -> None:
    edges, _ = import_graph.graph(typing_too=True)
    assert import_graph.cycles(edges) == []
