"""The README a newcomer follows: every path of the repository it names exists, or the paragraph that
names it says which command writes it; a table of contents whose links land on headings; "The first
ten minutes" before the reference; the pages it links to exist."""
from __future__ import annotations

import glob
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
# where a path of this repository starts (the top-level entries a README may name)
ROOTS = ("configs/", "rmsnorm_repro/", "results/", "scripts/", "notebooks/", "tests/", "docs/", "data/", ".venv",
         "Makefile", "pyproject.toml", "setup.py")
# a paragraph that names a path no checkout has says what writes it: a command and a verb
COMMAND = re.compile(r"make [a-z]|python -m |rmsnorm-(train|report)|scripts/\w+\.py")
WRITES = re.compile(r"\b(writ\w*|wrote|creat\w*|land\w*|download\w*|go(es)? (in)?to|puts?|makes?|builds?|refresh\w*)\b|->")


def blocks(text: str) -> list[str]:
    """Paragraphs, list items, table rows and code blocks: where a path's explanation would be."""
    return [b for b in re.split(r"\n\s*\n|\n(?=\s*- |\s*\d+\. |\|)", text) if b.strip()]


def named_paths(block: str) -> set[str]:
    """The repository paths in a block's `code` spans, links and code lines."""
    spans = re.findall(r"`([^`\n]+)`|\]\(([^)\s#]+)", block)
    code = block if block.lstrip().startswith(("```", "make ", "rmsnorm-", "python ", "ls ", "cat ")) else ""
    words = [w for pair in spans for part in pair for w in part.split()] + code.split()
    return {w.strip(",;:()[]'\"") for w in words if w.strip(",;:()[]'\"").startswith(ROOTS)}


def exists(path: str) -> bool:
    """`<task>` and `*` match any name; `{a,b}` each of a and b."""
    braces = re.search(r"\{([^}]*)\}", path)
    if braces:
        return all(exists(path[:braces.start()] + alt + path[braces.end():]) for alt in braces.group(1).split(","))
    pattern = re.sub(r"<[^>]+>", "*", path)
    return bool(glob.glob(str(REPO / pattern)))


def test_every_path_the_readme_names_exists_or_is_written_by_a_command_it_names():
    unexplained = []
    parts = blocks(README)
    for i, block in enumerate(parts):
        context = "\n".join(parts[max(0, i - 1): i + 2])  # a code block's explanation sits beside it
        for path in named_paths(block):
            if not exists(path) and not (COMMAND.search(context) and WRITES.search(context)):
                unexplained.append(f"{path}: {block.strip()[:100]!r}")
    assert not unexplained, "\n".join(unexplained)


def test_the_table_of_contents_lands_on_headings_and_the_first_ten_minutes_come_first():
    headings = re.findall(r"^#{2,3} (.+)$", README, flags=re.M)
    anchors = {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}
    contents = README[README.index("## Contents"):README.index("## The first ten minutes")]
    links = re.findall(r"\]\(#([^)]+)\)", contents)
    assert links and all(link in anchors for link in links), sorted(set(links) - anchors)
    assert headings.index("The first ten minutes") < headings.index("Usage") < headings.index("Speed")
    for page in re.findall(r"\]\((docs/[^)#]+)\)", README):
        assert (REPO / page).is_file(), page


def section(name: str) -> str:
    """A top-level section's text, to the next top-level heading."""
    start = README.index(f"\n## {name}\n")
    end = README.find("\n## ", start + 1)
    return README[start: end if end > 0 else None]


def test_the_reference_detail_lives_in_docs():
    assert len(README.splitlines()) < 500  # 538 before the speed and architecture detail moved out
    for name, page in (("Speed", "docs/performance.md"), ("Architecture", "docs/architecture.md")):
        assert len(section(name).splitlines()) < 30 and f"({page})" in section(name), name
    for name in ("record.py", "report/", "runner/", "tasks/", "norms/"):
        assert name in section("Architecture"), name
    # the short layout names only what the package has
    for folder in ("norms", "nn", "tasks", "runner", "report", "bench"):
        assert (REPO / "rmsnorm_repro" / folder).is_dir()
    assert (REPO / "rmsnorm_repro" / "report" / "compare.py").is_file()
