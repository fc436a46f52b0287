"""The manual has its own install route, `pip install '.[docs]' && mkdocs serve`."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_docs_extra_installs_what_mkdocs_yml_needs() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    names = {req.split(">")[0].split("=")[0].split("<")[0] for req in extras["docs"]}
    assert names == {"mkdocs", "mkdocs-material"}
    assert "theme:\n  name: material" in (ROOT / "mkdocs.yml").read_text()


def test_readme_gives_the_docs_route() -> None:
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "pip install '.[docs]' && mkdocs serve" in readme
