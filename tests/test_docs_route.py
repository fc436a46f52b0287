"""The manual has its own install route, `pip install '.[docs]' && mkdocs serve`."""

from __future__ import annotations

import re
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


def test_pages_with_docker_compose_commands_also_name_compose_v1() -> None:
    pages = [ROOT / "README.md", ROOT / "deploy" / "README.md", *(ROOT / "docs").rglob("*.md")]
    v2_only = [
        str(page.relative_to(ROOT))
        for page in pages
        if "docker compose " in (text := page.read_text())
        and not re.search(r"docker-compose(?![.\w])", text)
    ]
    assert not v2_only, f"pages that give `docker compose` but never `docker-compose`: {v2_only}"
