"""mkdocs hook: the benchmark result pages (`benchmarks/results/*.md` and their figures) become
pages of the site under `benchmarks/results/`.

The manual links them as `/benchmarks/results/NAME.md`: GitHub resolves such a link from the
repository's root, and mkdocs (`validation.links.absolute_links: relative_to_docs`) resolves it
to the page this hook adds, checks it and rewrites it, so one link works in both places. Files
only: `benchmarks/results/runs/` holds raw run logs, not pages.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

REPOSITORY = Path(__file__).resolve().parents[2]
RESULTS = Path("benchmarks") / "results"
SUFFIXES = {".md", ".png"}


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add each result page and figure, as if it lay at docs/benchmarks/results/."""
    for path in sorted((REPOSITORY / RESULTS).iterdir()):
        if path.is_file() and path.suffix in SUFFIXES:
            files.append(
                File(
                    (RESULTS / path.name).as_posix(),
                    src_dir=str(REPOSITORY),
                    dest_dir=config.site_dir,
                    use_directory_urls=config.use_directory_urls,
                )
            )
    return files
