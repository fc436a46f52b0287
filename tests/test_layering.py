"""The import layering of docs/architecture.md: the servers import no CLI code, and vfl_core no
gRPC and no other package of the project. Each check imports every module of a package in a
fresh interpreter where the forbidden modules cannot be imported."""

from __future__ import annotations

import subprocess
import sys

import pytest

CHECK = """
import importlib, pkgutil, sys
for name in {blocked!r}:
    sys.modules[name] = None  # importing it (or a submodule) now raises ImportError
for package in {packages!r}:
    root = importlib.import_module(package)
    for info in pkgutil.walk_packages(root.__path__, package + "."):
        importlib.import_module(info.name)
"""

LAYERS = {
    # the servers expose run_client / run_coordinator; their commands live in vfl_cli
    "servers without the CLI": (["vfl_client", "vfl_coordinator"], ["vfl_cli", "typer", "click"]),
    # one implementation of the algorithm, transport-free
    "core without gRPC": (
        ["vfl_core"],
        ["grpc", "vfl_wire", "vfl_client", "vfl_coordinator", "vfl_cli", "typer", "click"],
    ),
}


@pytest.mark.parametrize("layer", LAYERS)
def test_given_a_layer_when_every_module_is_imported_then_it_needs_nothing_above_it(
    layer: str,
) -> None:
    packages, blocked = LAYERS[layer]
    code = CHECK.format(blocked=blocked, packages=packages)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr.strip().splitlines()[-1]
