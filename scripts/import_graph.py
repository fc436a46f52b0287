"""Print vfl_core's import cycles and its imports of private names across modules (issue 28).

    python scripts/import_graph.py            # the cycles, then the private imports
    python scripts/import_graph.py --counts   # one line: files in cycles, upward imports, ...

Reads the source with `ast` (nothing is imported). A module's imports are every `import` and
`from ... import` in it, at any depth (function-level imports included: they still tie the
modules together; those under `if TYPE_CHECKING:` too, unless --runtime). "Cycles" are the
strongly connected components of more than one module; "upward" imports run from a lower
layer to a higher one (LAYERS below; tests/test_layering.py fails on both).
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "vfl_core"
# The layers, lowest first (docs/architecture.md draws them); a module's layer is its
# sub-package's (top-level modules of vfl_core are named here too). Importing from a higher layer
# is "upward"; modules of one layer may import each other (without a cycle).
# - base: errors, seeding, the transport-free messages (protocol) and atomic file writes;
# - data and model: a party's blocks and its networks (models read ModelConfig, their own
#   settings, and what they need of the run through protocols);
# - methods: the MethodSpec machinery, the registry and the method folders (laser, dvfl, dlvm),
#   the step vocabulary, and how heads' answers combine;
# - config: TrainConfig names a method of the registry and holds the methods' sections, so it
#   sits above them (the methods read it through vfl_core.methods.spec.RunConfig); auto_rounds
#   resolves a TrainConfig's unset rounds beside it;
# - inference (metrics, scoring, choices on validation) below training, which drives it;
# - persistence (checkpoints of Party and Federation, the run log) above what it saves;
# - lifecycle, simulate and serving on top; privacy's defences act on tensors (beside model).
LAYERS: dict[str, int] = {
    "errors": 0,
    "seeding": 0,
    "protocol": 0,
    "atomic_files": 0,
    "early_stop_defaults": 0,  # constants that config reads and re-exports (imports nothing)
    "data": 1,
    "model": 1,
    "privacy": 1,  # defences on tensors (on main since db9767d)
    "methods": 2,
    "config": 3,
    "auto_rounds": 3,  # the tables' default rounds, a config resolved (beside config)
    "inference": 4,
    "training": 5,
    "persistence": 6,
    "lifecycle": 7,
    "simulate": 7,
    "serving": 7,  # online prediction beside lifecycle (on main since db9767d)
}


def modules() -> dict[str, Path]:
    """Dotted name -> file, for every module of vfl_core."""
    out = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _nodes(tree: ast.AST, typing_too: bool) -> Iterator[ast.AST]:
    """Every node, without those under `if TYPE_CHECKING:` unless `typing_too`."""
    for node in ast.iter_child_nodes(tree):
        guarded = isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        if guarded and not typing_too:
            yield from (n for child in node.orelse for n in [child, *_nodes(child, typing_too)])
            continue
        yield node
        yield from _nodes(node, typing_too)


def imports(
    name: str, path: Path, known: dict[str, Path], typing_too: bool = True
) -> Iterator[tuple[str, str | None]]:
    """(imported vfl_core module, imported name or None) of every import in `path` (with
    `typing_too`, those only for type checkers as well)."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in _nodes(tree, typing_too):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PACKAGE):
                    yield _module(alias.name, known), None
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            if not base.startswith(PACKAGE):
                continue
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if full in known:
                    yield full, None
                else:
                    yield _module(base, known), alias.name


def _module(dotted: str, known: dict[str, Path]) -> str:
    while dotted and dotted not in known:
        dotted = dotted.rpartition(".")[0]
    return dotted


def graph(typing_too: bool = True) -> tuple[dict[str, set[str]], list[tuple[str, str, str]]]:
    """module -> the modules it imports; and (importer, module, name) of private-name imports."""
    known = modules()
    edges: dict[str, set[str]] = {m: set() for m in known}
    private = []
    for name, path in known.items():
        for target, imported in imports(name, path, known, typing_too):
            if target and target != name:
                edges[name].add(target)
            if imported and imported.startswith("_") and not imported.startswith("__"):
                private.append((name, target, imported))
    return edges, private


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def layer(module: str) -> int | None:
    parts = module.split(".")
    return LAYERS.get(parts[1]) if len(parts) > 1 else None


def upward(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    out = []
    for source, targets in sorted(edges.items()):
        for target in sorted(targets):
            a, b = layer(source), layer(target)
            if a is not None and b is not None and b > a:
                out.append((source, target))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", action="store_true", help="one line of counts")
    parser.add_argument(
        "--runtime", action="store_true", help="leave out imports under `if TYPE_CHECKING:`"
    )
    args = parser.parse_args()
    edges, private = graph(typing_too=not args.runtime)
    found, up = cycles(edges), upward(edges)
    in_cycles = sorted({m for c in found for m in c})
    if args.counts:
        print(
            f"{len(edges)} modules; {len(found)} cycle(s) holding {len(in_cycles)} modules; "
            f"{len(up)} upward imports; {len(private)} imports of private names"
        )
        return
    for i, component in enumerate(found, 1):
        print(f"cycle {i} ({len(component)} modules): {', '.join(component)}")
    for source, target in up:
        print(f"upward: {source} -> {target}")
    for source, target, name in private:
        print(f"private: {source} imports {name} from {target}")


if __name__ == "__main__":
    main()
