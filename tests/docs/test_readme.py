"""The README stays short enough to finish, and it and the pages under docs/ link only to files
that exist: the detail lives in docs/, one page per topic, each linked from the README.

Links are the markdown kind, `[text](target)` and `![alt](target)`, outside code; a target with a
scheme (https:, mailto:) is not a file and is skipped. An anchor on a link to a markdown file, or
on its own (`#uninstall`, the page itself), must name one of that file's headings (GitHub's
slugs), so that a section moved out of the README cannot leave `../README.md#runbook-gpu-health`
pointing nowhere."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"
MAX_README_LINES = 300

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
HEADLINE_START = "<!-- headline:start -->"
HEADLINE_END = "<!-- headline:end -->"


def _pages() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def _prose(text: str) -> str:
    """The text without fenced code blocks and code spans, where `](` is not a link."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def links(text: str) -> list[str]:
    """Every markdown link target in the text, outside code."""
    return LINK.findall(_prose(text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup gone, lower case, punctuation but `-` and `_`
    dropped, spaces to `-`."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a markdown file's headings; a repeated heading gets -1, -2, ..."""
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(FENCE.sub("", path.read_text())):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def broken_links(page: Path) -> list[str]:
    """Relative links of the page whose file does not exist, or whose anchor names no heading
    of the markdown file it points to (the page itself when the link is only an anchor)."""
    broken = []
    for target in links(page.read_text()):
        if SCHEME.match(target):
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists() or (
                anchor and resolved.suffix == ".md" and anchor not in anchors(resolved)):
            broken.append(target)
    return broken


def _headline_block(text: str) -> str:
    start = text.index(HEADLINE_START) + len(HEADLINE_START)
    return text[start:text.index(HEADLINE_END)].strip()


def _is_table(block: str) -> bool:
    rows = block.splitlines()
    if len(rows) < 3 or not all(r.startswith("|") and r.endswith("|") for r in rows):
        return False
    widths = {r.count("|") for r in rows}
    separator = re.fullmatch(r"\|(\s*:?-{3,}:?\s*\|)+", rows[1])
    return len(widths) == 1 and separator is not None


def test_the_readme_is_at_most_300_lines():
    count = len(README.read_text().splitlines())
    assert count <= MAX_README_LINES, (
        f"README.md has {count} lines (at most {MAX_README_LINES}): move detail into docs/")


def test_every_relative_link_in_the_readme_and_the_docs_resolves():
    broken = {str(p.relative_to(REPO)): broken_links(p) for p in [README, *_pages()]}
    broken = {page: targets for page, targets in broken.items() if targets}
    assert broken == {}, f"links to missing files or headings: {broken}"


def test_a_broken_file_or_anchor_is_found(tmp_path):
    page = tmp_path / "a.md"
    page.write_text("# A\n\n## Two words\n\n[ok](a.md#two-words) [self](#two-words) "
                    "[bad](a.md#nope) [self-bad](#nope) [gone](b.md#x) [web](https://e.org/x)\n")
    assert broken_links(page) == ["a.md#nope", "#nope", "b.md#x"]


def test_the_readme_links_every_docs_page():
    linked = {(REPO / t.partition("#")[0]).resolve() for t in links(README.read_text())
              if not SCHEME.match(t) and not t.startswith("#")}
    missing = sorted(p.name for p in _pages() if p.resolve() not in linked)
    assert missing == [], f"README.md does not link docs/{missing}"


def test_every_docs_page_opens_with_a_title_and_a_paragraph_saying_what_it_holds():
    for page in _pages():
        blocks = page.read_text().split("\n\n")
        assert blocks[0].startswith("# ") and "\n" not in blocks[0].strip(), page.name
        opening = blocks[1].strip()
        assert opening and not opening.startswith(("#", "|", "-", "```", "!")), (
            f"docs/{page.name} does not open with a paragraph after its title")


def test_the_headline_markers_appear_once_each_and_enclose_a_table():
    text = README.read_text()
    assert text.count(HEADLINE_START) == 1 and text.count(HEADLINE_END) == 1
    assert text.index(HEADLINE_START) < text.index(HEADLINE_END)
    assert _is_table(_headline_block(text)), "the headline markers do not enclose one table"


def test_the_checks_themselves():
    text = ("[a](x.md#s) ![p](y.svg) `[no](z.md)` [w](https://e.org) [h](#top)\n"
            "```\n[no](q.md)\n```\n")
    assert links(text) == ["x.md#s", "y.svg", "https://e.org", "#top"]
    assert slug("Runbook: GPU health") == "runbook-gpu-health"
    assert slug("The planner (`policies.planner.preemption.plan`)") == (
        "the-planner-policiesplannerpreemptionplan")
    assert slug("Trust: what is guaranteed, and how it is attacked in tests") == (
        "trust-what-is-guaranteed-and-how-it-is-attacked-in-tests")
    assert _is_table("| a | b |\n|---|---|\n| 1 | 2 |")
    assert not _is_table("| a | b |\n| 1 | 2 |")
    assert not _is_table("| a | b |\n|---|---|\n| 1 | 2 | 3 |")
    assert not _is_table("| a | b |\n|---|---|")


EVIDENCE = REPO / "bench" / "results" / "evidence.md"
EVIDENCE_HEADLINE = "## Headline: total lost GPU-hours ÷ the strongest baseline"


def _evidence_headline_rows() -> dict[str, str]:
    """The committed evidence report's headline table: header and rows, keyed by first cell."""
    text = EVIDENCE.read_text()
    after = text[text.index(EVIDENCE_HEADLINE) + len(EVIDENCE_HEADLINE):]
    rows = {}
    for line in after.strip().splitlines():
        if not line.startswith("|"):
            break
        rows[line.split("|")[1].strip()] = line.strip()
    return rows


def test_the_readme_headline_is_the_committed_evidence():
    """Each row of the README's headline table is the same row of bench/results/evidence.md
    (the report bench/evidence.py writes), header included: a new evidence run that moves a
    number fails this until the README shows it."""
    committed = _evidence_headline_rows()
    shown = _headline_block(README.read_text()).splitlines()
    for row in [shown[0], *shown[2:]]:
        key = row.split("|")[1].strip()
        assert committed.get(key) == row.strip(), f"README headline row {key!r} is not the report's"


def test_the_readme_says_how_long_make_run_takes():
    line = next(t for t in README.read_text().splitlines() if "<!-- make-run-time -->" in t)
    assert re.search(r"`make run` takes (about )?\d+ (s|seconds|min)", line), line
