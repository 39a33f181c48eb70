"""docs/architecture.md's picture names only what exists, is rendered from its current source,
and the page links every part of it: so the map cannot drift from the tree unnoticed."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
SOURCE = DOCS / "architecture.dot"
RENDERED = DOCS / "architecture.svg"
# Quoted node ids that are repository paths: a module ("controller/kube/watch.py") or a folder
# ("policies/sim/"). Ids of things outside the repo start with "ext_".
PATH_ID = re.compile(r'(?:^\s*|->\s*)"((?:[a-z_]+/)+(?:[a-z_]+\.py)?)"', re.MULTILINE)


def _paths(text: str) -> set[str]:
    return set(PATH_ID.findall(text))


def test_every_path_the_diagram_names_exists():
    paths = _paths(SOURCE.read_text())
    assert len(paths) >= 10, paths  # the parser still finds the diagram's paths
    missing = sorted(p for p in paths if not (REPO / p).exists())
    assert missing == [], f"docs/architecture.dot names paths that do not exist: {missing}"


def test_the_parser_finds_modules_and_folders_and_skips_external_nodes():
    text = '"controller/kube/watch.py" -> "ext_apiserver";\n  "policies/sim/" [label="x/y.py"]'
    assert _paths(text) == {"controller/kube/watch.py", "policies/sim/"}


def test_the_svg_is_rendered_from_the_current_source():
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()
    stamp = re.search(r"rendered from docs/architecture.dot sha256:([0-9a-f]{64})",
                      RENDERED.read_text())
    assert stamp, "docs/architecture.svg carries no source stamp: run `make docs`"
    assert stamp.group(1) == digest, "docs/architecture.svg is stale: run `make docs`"


def test_the_page_shows_the_picture_and_the_readme_links_the_page():
    page = (DOCS / "architecture.md").read_text()
    assert "(architecture.svg)" in page and "(architecture.dot)" in page
    assert "docs/architecture.md" in (REPO / "README.md").read_text()


def test_every_top_level_package_is_in_the_pages_layer_table():
    page = (DOCS / "architecture.md").read_text()
    packages = {p.name for p in REPO.iterdir()
                if (p / "__init__.py").exists() and p.name not in {"tests", "e2e", "bench"}}
    assert packages == {"policies", "controller", "hwprobe", "cli"}, packages
    for name in packages:
        assert f"| `{name}/`" in page, f"docs/architecture.md's layer table lacks {name}/"
