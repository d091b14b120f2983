"""The README and docs/ stay readable and whole: the README is short, no page has a paragraph longer than about 12
lines, every relative link resolves, every page is reachable, the design notes the code cites exist, and the
README's accuracy tables are what the committed results give (tools/readme_tables.py)."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from stepcast.profiling.paths import REPO_ROOT
from tests.tools import load_tool

readme_tables = load_tool("readme_tables")

README = REPO_ROOT / "README.md"
DOCS = REPO_ROOT / "docs"
README_MAX_LINES = 210
PARAGRAPH_MAX_LINES = 12
#: a paragraph's length is counted in lines of this width, so one very long source line counts as what it reads as
WRAP = 120
#: folders whose source may cite the design notes
CODE_DIRS = ("emulate", "estimator", "profiling", "stepcast", "benchmarks", "tools", "conf")
#: how code cites a section of the design notes: design notes, "Title"
CITATION = re.compile(r'design notes,\s*"([^"]+)"')
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(\s*([^)\s]+)\)|!\[[^\]]*\]\(\s*([^)\s]+)\)")
LIST_ITEM = re.compile(r"^\s*([-*+]|\d+\.)\s")


def pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of the prose: fenced code, tables, headings and HTML comments become blank lines."""
    out: list[tuple[int, str]] = []
    fenced = comment = False
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            fenced = not fenced
            out.append((number, ""))
            continue
        if stripped.startswith("<!--"):
            comment = "-->" not in stripped
            out.append((number, ""))
            continue
        if comment:
            comment = "-->" not in stripped
            out.append((number, ""))
            continue
        skip = fenced or stripped.startswith(("|", "#"))
        out.append((number, "" if skip else line))
    return out


def paragraphs(text: str) -> list[tuple[int, int]]:
    """(first line number, length in lines of WRAP columns) of each paragraph; a list item starts a new one."""
    found: list[tuple[int, int]] = []
    start, length = 0, 0
    for number, line in prose_lines(text):
        if not line.strip() or LIST_ITEM.match(line):
            if length:
                found.append((start, length))
            start, length = (number, 0) if line.strip() else (0, 0)
        if line.strip():
            start = start or number
            length += max(1, math.ceil(len(line.rstrip()) / WRAP))
    if length:
        found.append((start, length))
    return found


def excess_lines(path: Path, limit: int = README_MAX_LINES) -> int:
    """How many lines ``path`` has beyond ``limit`` (0 when within it)."""
    return max(0, len(path.read_text().splitlines()) - limit)


def long_paragraphs(path: Path, limit: int = PARAGRAPH_MAX_LINES) -> list[str]:
    return [f"{path.name}:{start}: {length} lines" for start, length in paragraphs(path.read_text())
            if length > limit]


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(line.lstrip("#")) for number, line in enumerate(path.read_text().splitlines())
            if re.match(r"#{1,6} ", line)}


def links(path: Path) -> list[str]:
    """Relative link targets of a page's prose and tables (code spans and fenced code excluded)."""
    text = "\n".join(line for _, line in prose_lines(path.read_text()))
    table_rows = [line for line in path.read_text().splitlines() if line.strip().startswith("|")]
    text = re.sub(r"`[^`]*`", "", text + "\n" + "\n".join(table_rows))
    targets = [a or b for a, b in LINK.findall(text)]
    return [t for t in targets if not re.match(r"[a-z]+:", t)]


def broken_links(path: Path) -> list[str]:
    broken = []
    for target in links(path):
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path
        if not resolved.exists():
            broken.append(f"{path.name}: {target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{path.name}: {target}: no heading #{anchor} in {resolved.name}")
    return broken


def unlinked(docs: Path, readme: Path) -> list[str]:
    """Pages of ``docs`` that neither the README nor another page of ``docs`` links to."""
    linked: set[Path] = set()
    for page in [readme, *docs.glob("*.md")]:
        for target in links(page):
            file = target.partition("#")[0]
            if file:
                resolved = (page.parent / file).resolve()
                if resolved != page.resolve():
                    linked.add(resolved)
    return sorted(p.name for p in docs.glob("*.md") if p.resolve() not in linked)


def design_citations(roots: list[Path]) -> list[tuple[str, str]]:
    """(file:line, section title) of every citation of the design notes under ``roots``."""
    found = []
    for root in roots:
        files = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file() and
                                               p.suffix in (".py", ".c", ".h", ".yaml", ".sh")]
        for path in files:
            text = path.read_text(errors="replace")
            for match in CITATION.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                found.append((f"{path}:{line}", match.group(1)))
    return found


def missing_design_sections(roots: list[Path], design: Path) -> list[str]:
    titles = {line.lstrip("#").strip() for line in design.read_text().splitlines() if re.match(r"#{1,6} ", line)}
    return [f"{where}: {title!r}" for where, title in design_citations(roots) if title not in titles]


# -- the committed README and pages --------------------------------------------------------------------------------

def test_readme_is_at_most_about_200_lines():
    assert excess_lines(README) == 0


def test_no_page_has_a_paragraph_longer_than_12_lines():
    assert [hit for page in pages() for hit in long_paragraphs(page)] == []


def test_every_relative_link_resolves():
    assert [hit for page in pages() for hit in broken_links(page)] == []


def test_every_docs_page_is_linked_from_the_readme_or_another_page():
    assert unlinked(DOCS, README) == []


def test_every_design_notes_citation_in_the_code_names_a_section_of_docs_design():
    roots = [REPO_ROOT / d for d in CODE_DIRS if (REPO_ROOT / d).exists()]
    assert design_citations(roots), "the code cites the design notes (emulate/sim/engine.py): the search found none"
    assert missing_design_sections(roots, DOCS / "design.md") == []


def test_readme_accuracy_tables_are_what_the_committed_results_give():
    assert readme_tables.readme_block(README.read_text()) == readme_tables.render(), (
        "README accuracy tables are stale: python tools/readme_tables.py --write")


# -- each check fails on a planted bad input -----------------------------------------------------------------------

def test_a_paragraph_of_13_lines_is_reported_and_code_tables_and_lists_are_not(tmp_path):
    page = tmp_path / "page.md"
    long_line = "word " * 30  # 150 columns: two lines at WRAP
    page.write_text("# Title\n\n" + "short line\n" * 13 + "\n```\n" + "code\n" * 30 + "```\n\n"
                    + "| a |\n" * 30 + "\n" + "- item\n" * 30 + "\n" + f"{long_line}\n" * 6 + "\n")
    assert long_paragraphs(page) == ["page.md:3: 13 lines"]
    page.write_text(f"{long_line}\n" * 7)
    assert long_paragraphs(page) == ["page.md:1: 14 lines"]


def test_a_link_to_a_missing_file_or_heading_is_reported(tmp_path):
    (tmp_path / "other.md").write_text("# Other page\n\n## A section\n")
    page = tmp_path / "page.md"
    page.write_text("See [other](other.md#a-section), [gone](gone.md), [bad](other.md#no-section), "
                    "`[code](ignored.md)`, [web](https://example.com) and ![pic](missing.png).\n")
    assert broken_links(page) == ["page.md: gone.md: no such file",
                                  "page.md: other.md#no-section: no heading #no-section in other.md",
                                  "page.md: missing.png: no such file"]


def test_a_page_nobody_links_to_is_reported(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "linked.md").write_text("# Linked\n\nSee [orphan's neighbour](self.md).\n")
    (docs / "self.md").write_text("# Self\n\nOnly [itself](self.md).\n")
    (docs / "orphan.md").write_text("# Orphan\n")
    readme = tmp_path / "README.md"
    readme.write_text("[linked](docs/linked.md)\n")
    assert unlinked(docs, readme) == ["orphan.md"]


def test_a_citation_of_a_design_section_that_does_not_exist_is_reported(tmp_path):
    code = tmp_path / "engine.py"
    code.write_text('"""Model (design notes, "Collation and simulation").\n\nSee design notes, "No such part"."""\n')
    design = tmp_path / "design.md"
    design.write_text("# Design notes\n\n## Collation and simulation\n")
    assert missing_design_sections([tmp_path], design) == [f"{code}:3: 'No such part'"]


def test_a_readme_longer_than_the_limit_is_reported(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("line\n" * (README_MAX_LINES + 3))
    assert excess_lines(readme) == 3
    readme.write_text("line\n" * README_MAX_LINES)
    assert excess_lines(readme) == 0


def test_stale_accuracy_tables_are_told_apart_from_fresh_ones(tmp_path):
    text = README.read_text()
    stale = readme_tables.replace_block(text, readme_tables.render().replace("| 3.3 |", "| 3.4 |", 1))
    readme = tmp_path / "README.md"
    readme.write_text(stale)
    assert readme_tables.main(["--check", "--readme", str(readme)]) == 1
    readme.write_text(text)
    assert readme_tables.main(["--check", "--readme", str(readme)]) == 0


#: the committed results files the README's tables are made from
RESULTS_FILES = ("e2e_neusight.json", "e2e_neusight_unseen.json", "torchtitan.json", "kernelbench_eager.json",
                 "kernelbench_compiled.json", "unseen.json")


def copy_results(folder: Path, but: str | None = None) -> None:
    """The committed results files (all of them, or all ``but`` one) into ``folder``."""
    for name in RESULTS_FILES:
        if name != but:
            (folder / name).write_text((DOCS / "results" / name).read_text())


def test_a_results_file_without_a_field_the_tables_need_is_one_line_naming_it(tmp_path, capsys):
    copy_results(tmp_path)
    (tmp_path / "torchtitan.json").write_text('{"torchtitan": {"rows": []}}')
    assert readme_tables.main(["--results", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"stepcast: {tmp_path / 'torchtitan.json'}: no field torchtitan.summary"


@pytest.mark.parametrize("missing", ["kernelbench_eager.json", "kernelbench_compiled.json", "unseen.json"])
def test_a_missing_results_file_is_named(tmp_path, capsys, missing):
    copy_results(tmp_path, but=missing)
    assert readme_tables.main(["--results", str(tmp_path)]) == 2
    assert str(tmp_path / missing) in capsys.readouterr().err


def test_a_gpu_whose_timings_hold_no_host_keeps_its_row_without_a_launch_bound_figure(tmp_path):
    copy_results(tmp_path)
    doc = json.loads((tmp_path / "kernelbench_eager.json").read_text())
    doc["medians"]["launch bound"].pop("t4")
    doc["host_not_timed"] = ["t4"]
    (tmp_path / "kernelbench_eager.json").write_text(json.dumps(doc))
    text = readme_tables.render(tmp_path)
    assert re.search(r"^\| `t4` \| - \| \d", text, re.MULTILINE)
    assert "`t4`: its timings do not hold the host" in text
