"""Regenerate the committed gRPC stubs, or check that they are current.

    python -m vfl_wire.codegen          # rewrite vfl_wire/v1/vfl_pb2{.py,_grpc.py,.pyi}
    python -m vfl_wire.codegen --check  # exit 1, naming the stale files, if they differ (CI)

Runs `grpc_tools.protoc -Iproto --python_out=. --grpc_python_out=. --pyi_out=.` from the repository
root on every `.proto` under `proto/`. The output depends on the grpcio-tools version, so the
command refuses to run with any version but the one pinned in pyproject.toml.
"""

from __future__ import annotations

import argparse
import filecmp
import importlib.metadata
import re
import shutil
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
_PIN = re.compile(r'"grpcio-tools==([^"]+)"')


class CodegenError(Exception):
    """The stubs cannot be generated here (no proto sources, wrong grpcio-tools, protoc failed)."""


def proto_files() -> list[Path]:
    """Every .proto under proto/, relative to proto/, sorted."""
    proto_dir = _proto_dir()
    if not proto_dir.is_dir():
        raise CodegenError(f"no proto directory at {proto_dir} (run from a source checkout)")
    files = sorted(p.relative_to(proto_dir) for p in proto_dir.rglob("*.proto"))
    if not files:
        raise CodegenError(f"no .proto files under {proto_dir}")
    return files


def _proto_dir() -> Path:
    return REPO_ROOT / "proto"


def pinned_tools_version() -> str | None:
    """The grpcio-tools version pinned in pyproject.toml, or None if there is no pin."""
    pyproject = REPO_ROOT / "pyproject.toml"
    if not pyproject.is_file():
        return None
    match = _PIN.search(pyproject.read_text(encoding="utf-8"))
    return match.group(1) if match else None


def check_tools_version() -> None:
    pinned = pinned_tools_version()
    installed = importlib.metadata.version("grpcio-tools")
    if pinned is not None and installed != pinned:
        raise CodegenError(
            f"grpcio-tools {installed} is installed but pyproject.toml pins {pinned}; "
            f"run `pip install grpcio-tools=={pinned}` first"
        )


def generate(out_dir: Path) -> list[Path]:
    """Run protoc into out_dir; return the generated files relative to out_dir."""
    from grpc_tools import protoc  # dev dependency: import only when generating

    check_tools_version()
    protos = proto_files()
    proto_dir = _proto_dir()
    well_known = Path(protoc.__file__).parent / "_proto"
    args = [
        "grpc_tools.protoc",
        f"-I{proto_dir}",
        f"-I{well_known}",
        f"--python_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        f"--pyi_out={out_dir}",
        *(str(proto_dir / p) for p in protos),
    ]
    if protoc.main(args) != 0:
        raise CodegenError("protoc failed (its message is above)")
    return sorted(p.relative_to(out_dir) for p in out_dir.rglob("*") if p.is_file())


def stale_files(fresh_dir: Path, generated: list[Path]) -> list[Path]:
    """Generated files whose committed copy under the repo root is missing or different."""
    return [
        rel
        for rel in generated
        if not (REPO_ROOT / rel).is_file()
        or not filecmp.cmp(fresh_dir / rel, REPO_ROOT / rel, shallow=False)
    ]


def regenerate() -> list[Path]:
    """Regenerate in place (via a temp dir, so a failed run leaves the stubs untouched)."""
    with tempfile.TemporaryDirectory() as tmp:
        generated = generate(Path(tmp))
        for rel in generated:
            target = REPO_ROOT / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(Path(tmp) / rel, target)
    return generated


def check() -> list[Path]:
    """Regenerate into a temp dir and return the committed files that differ."""
    with tempfile.TemporaryDirectory() as tmp:
        generated = generate(Path(tmp))
        return stale_files(Path(tmp), generated)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vfl_wire.codegen", description=__doc__)
    parser.add_argument(
        "--check", action="store_true", help="fail if the committed stubs are out of date"
    )
    args = parser.parse_args(argv)
    try:
        if args.check:
            stale = check()
            if stale:
                names = ", ".join(str(p) for p in stale)
                print(
                    f"stale generated stubs: {names}; run `python -m vfl_wire.codegen`",
                    file=sys.stderr,
                )
                return 1
            print("generated stubs are up to date")
            return 0
        for rel in regenerate():
            print(f"wrote {rel}")
        return 0
    except CodegenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
