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
    assert len(README.splitlines()) < 350  # 499 before the runs', reports', data and wandb detail moved to docs/
    for name, page in (("Speed", "docs/performance.md"), ("Architecture", "docs/architecture.md")):
        assert len(section(name).splitlines()) < 30 and f"({page})" in section(name), name


def test_the_architecture_names_every_part_of_the_package():
    """The README's layers and docs/architecture.md's file list name what the package has, and only that."""
    package = REPO / "rmsnorm_repro"
    parts = sorted({p.name for p in package.iterdir() if p.is_dir() and (p / "__init__.py").exists()})
    modules = sorted(p.name for p in package.glob("*.py") if p.name != "__init__.py")
    files = sorted(str(p.relative_to(package)) for p in package.rglob("*.py")
                   if p.name != "__init__.py" and "__pycache__" not in p.parts)
    architecture, page = section("Architecture"), (REPO / "docs" / "architecture.md").read_text()
    for name in [f"{part}/" for part in parts] + modules:
        assert name in architecture, name
    for path in files:  # each file by its name, under its folder's entry
        assert Path(path).name in page, path
    for name in re.findall(r"(?<![/\w])([a-z_]+\.py)\b", architecture):
        assert list(package.rglob(name)) or list(REPO.glob(f"tests/{name}")), name
