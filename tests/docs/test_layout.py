"""The README's layout table, the wheel's package list and the tree agree: a package added,
moved or removed without updating both fails here, not in a user's `pip install`."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHIPPED = ("policies", "controller", "hwprobe", "cli")  # installed as ckpt_preempt.<name>
ROW = re.compile(r"^\| `([a-z_/]+/)` \|", re.MULTILINE)


def _packages() -> set[str]:
    """Every folder of the shipped code with an __init__.py, as "controller/kube/"."""
    found = set()
    for top in SHIPPED:
        for init in (REPO / top).rglob("__init__.py"):
            if "__pycache__" not in init.parts:
                found.add(init.parent.relative_to(REPO).as_posix() + "/")
    return found


def _layout_rows() -> list[str]:
    text = (REPO / "README.md").read_text()
    table = text[text.index("## Layout"):]
    table = table[:table.index("\n\n", table.index("| package |"))]
    return ROW.findall(table)


def test_every_package_is_in_the_readme_layout_table_and_every_row_exists():
    rows = _layout_rows()
    assert len(rows) == len(set(rows)), "a package is listed twice"
    missing = sorted(_packages() - set(rows))
    assert missing == [], f"README.md's layout table lacks {missing}"
    gone = sorted(r for r in rows if not (REPO / r).is_dir())
    assert gone == [], f"README.md's layout table names folders that do not exist: {gone}"


def test_the_wheel_declares_every_package():
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    declared = {name.removeprefix("ckpt_preempt.").replace(".", "/") + "/"
                for name in setuptools["packages"]}
    missing = sorted(_packages() - declared)
    assert missing == [], f"pyproject.toml's [tool.setuptools] packages lacks {missing}"


def test_the_finders_see_the_tree():
    assert {"controller/kube/", "policies/planner/", "hwprobe/"} <= _packages()
    assert "controller/app/" in _layout_rows() and "bench/" in _layout_rows()
