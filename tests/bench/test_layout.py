"""bench/ and e2e/ keep one import direction and one benchmark header: e2e tests and benchmarks
import the harness (e2e/harness/), never the reverse; nothing under e2e/ imports bench; no
benchmark edits sys.path (they run as `python -m bench.NAME` from the repository root); and
every benchmark's docstring says how to run it and what it aims for."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
E2E = REPO / "e2e"


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _imported(path: Path) -> set[str]:
    """Every module `path` imports, anywhere in the file (inside functions too), as dotted
    names; `from a import b` counts as both a and a.b."""
    out = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return out


def _python_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def _benchmarks() -> list[Path]:
    """The bench modules a user runs: those with a top-level main()."""
    return [p for p in sorted(BENCH.glob("*.py"))
            if any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in _tree(p).body)]


def test_the_scanners_see_what_is_there():
    # a finder that found nothing would pass every test below
    assert "e2e.harness.chaos" in _imported(E2E / "test_chaos.py")
    assert "e2e.harness.chaos" in _imported(BENCH / "chaos.py")
    assert {"chaos", "evidence", "differential", "scale_kwok"} <= {p.stem for p in _benchmarks()}


def test_nothing_under_e2e_imports_bench():
    offenders = {p.relative_to(REPO).as_posix(): sorted(m for m in _imported(p)
                                                        if m == "bench" or m.startswith("bench."))
                 for p in _python_files(E2E)}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_harness_imports_no_test_module():
    def is_test_module(m: str) -> bool:
        parts = m.split(".")
        return parts[0] == "e2e" and len(parts) > 1 and (parts[1].startswith("test_")
                                                          or parts[1] == "conftest")
    offenders = {p.relative_to(REPO).as_posix(): sorted(filter(is_test_module, _imported(p)))
                 for p in _python_files(E2E / "harness")}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_every_e2e_test_module_holds_tests():
    """A helper module named test_*.py would be collected by pytest as tests; helpers live in
    e2e/harness/ under names that say what they are."""
    empty = [p.name for p in sorted(E2E.glob("test_*.py"))
             if not any(isinstance(n, ast.FunctionDef | ast.ClassDef)
                        and n.name.startswith(("test_", "Test")) for n in _tree(p).body)]
    assert empty == []


def test_no_bench_module_edits_sys_path():
    offenders = [p.name for p in _python_files(BENCH)
                 if any(isinstance(n, ast.Attribute) and n.attr == "path"
                        and isinstance(n.value, ast.Name) and n.value.id == "sys"
                        for n in ast.walk(_tree(p)))]
    assert offenders == []


@pytest.mark.parametrize("path", _benchmarks(), ids=lambda p: p.stem)
def test_every_benchmark_says_what_how_to_run_and_its_target(path):
    doc = ast.get_docstring(_tree(path)) or ""
    paragraphs = doc.split("\n\n")
    assert len(paragraphs) >= 2 and not paragraphs[0].startswith(("Usage:", "Target:")), \
        f"{path.name}: the docstring starts with what it measures"
    lines = doc.splitlines()
    usage = re.compile(rf"Usage: python -m bench\.{path.stem}( |$)")
    assert any(usage.match(line) for line in lines), \
        f"{path.name}: needs a line 'Usage: python -m bench.{path.stem} [flags]'"
    target = [line for line in lines if line.startswith("Target: ")]
    assert len(target) == 1 and len(target[0]) > len("Target: "), \
        f"{path.name}: needs one 'Target: ...' line"
