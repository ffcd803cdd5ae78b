"""The design docs stay true to the tree: docs/architecture.md places every module of pacer/ and
gpu/ and names only paths that exist. The decision log in docs/decisions/ numbers its entries
without gaps across its pages, gives each its four parts in a few lines, cites only entries
bench/RESULTS.md has, and states no figure (they live in bench/RESULTS.md); its index lists every
entry on its page. References to the pages, from the docs and the code, name what is there."""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
DECISIONS = ROOT / "docs" / "decisions"
INDEX = DECISIONS / "README.md"
RESULTS = ROOT / "bench" / "RESULTS.md"
TREE = ("pacer/", "gpu/", "tests/", "bench/", "deploy/", "dashboards/", "docs/")
PARTS = ("*Decision.*", "*Context.*", "*Rejected.*", "*Evidence.*")
MAX_ENTRY_LINES = 15
MAX_LINE_CHARS = 100
CITATION = re.compile(r'RESULTS (\d{4}-\d{2}-\d{2}), "([^"]+)"')
FIGURE = re.compile(
    r"(?<![\w^.])\d[\d,.]*\s?"
    r"(?:ms|µs|s|GiB|MiB|GB/s|GB|MB|KB|ns|%|×|partitions/s|a second|times)(?![\w/])"
)
HEADING = re.compile(r"^#{1,6} ", flags=re.MULTILINE)
SUPERSEDED = re.compile(r" \(superseded by D(\d+)\)$")
INDEX_ROW = re.compile(
    r"^\| D(\d+) \| (.+?) \| \[([\w-]+\.md)\]\(([\w-]+\.md)#([^)\s]+)\) \|(.*?)\|$",
    flags=re.MULTILINE,
)


@dataclass(frozen=True)
class Entry:
    """One decision: its number, the page it is on, its heading after "Dn. " and its body (the
    lines up to the next heading)."""

    number: int
    page: Path
    heading: str
    body: str

    @property
    def title(self) -> str:
        return SUPERSEDED.sub("", self.heading)

    @property
    def superseded_by(self) -> int | None:
        found = SUPERSEDED.search(self.heading)
        return int(found[1]) if found else None

    @property
    def lines(self) -> list[str]:
        return [line for line in self.body.splitlines() if line.strip()]


def flat(text: str) -> str:
    """``text`` with every run of whitespace one space (quotes wrap across lines)."""
    return " ".join(text.split())


def backticked(text: str) -> list[str]:
    return re.findall(r"`([^`\n]+)`", text)


def exists(token: str, *, under: str = "") -> bool:
    """Whether ``token`` (a path, maybe a glob, maybe relative to ``under``) names a file or
    folder of the tree."""
    for base in (ROOT, ROOT / under) if under else (ROOT,):
        if any(ch in token for ch in "*?["):
            if list(base.glob(token)):
                return True
        elif (base / token).exists():
            return True
    return False


def anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    kept = (ch for ch in heading.lower() if ch in " -_" or unicodedata.category(ch)[0] in "LMN")
    return "".join(kept).replace(" ", "-")


def decision_pages() -> list[Path]:
    """The pages of the decision log, its index left out."""
    return sorted(path for path in DECISIONS.glob("*.md") if path != INDEX)


def entries() -> list[Entry]:
    """Every entry of every page of the decision log, in the order the pages hold them."""
    found = []
    for page in decision_pages():
        text = page.read_text(encoding="utf-8")
        parts = re.split(r"^### D(\d+)\. (.+)$", text, flags=re.MULTILINE)
        for number, heading, rest in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
            body = HEADING.split(rest, maxsplit=1)[0]
            found.append(Entry(int(number), page, heading.strip(), body))
    return found


def decisions() -> dict[int, Entry]:
    """Each entry of the decision log by its number."""
    return {entry.number: entry for entry in entries()}


def results_titles() -> set[tuple[str, str]]:
    found = re.findall(r"^## (\d{4}-\d{2}-\d{2}) — (.+)$", RESULTS.read_text(encoding="utf-8"),
                       flags=re.MULTILINE)  # fmt: skip
    return {(date, flat(title)) for date, title in found}


def structure_rows(section: str) -> list[tuple[str, str]]:
    """(first cell, whole row) of every table row in ``section`` of the structure page."""
    return re.findall(r"^\| (`[^|]+`) \|(.*)$", section, flags=re.MULTILINE)


def pages() -> list[Path]:
    """Every page these checks read: the structure page, the log's index and its pages."""
    return [ARCHITECTURE, INDEX, *decision_pages()]


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT / "docs"))


def test_the_structure_page_places_every_module() -> None:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    pacer_part, gpu_part = text.split("### `gpu/`", 1)
    gpu_part = gpu_part.split("\n### ", 1)[0]
    missing = []
    for package, part in (("pacer", pacer_part), ("gpu", gpu_part)):
        rows = structure_rows(part)
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT / package)
            if path.name == "__init__.py" and len(relative.parts) == 1:
                continue
            if len(relative.parts) == 1:
                placed = any(f"`{path.name}`" in first for first, _ in rows)
            else:
                folder = f"`{relative.parts[0]}/`"
                inner = "/".join(relative.parts[1:])
                placed = path.name == "__init__.py" or any(
                    folder in first and f"`{inner}`" in row for first, row in rows
                )
            if not placed:
                missing.append(f"{package}/{relative}")
    assert missing == [], "modules the structure page does not place"


@pytest.mark.parametrize("page", pages(), ids=page_id)
def test_every_path_a_page_names_exists(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    bare = re.findall(rf"(?<![\w/.])((?:{'|'.join(TREE)})[\w./*-]*\w)", text)
    named = {t.rstrip(".,:;") for t in backticked(text) + bare}
    paths = {
        t for t in named
        if "/" in t and not t.startswith("/") and not re.search(r"[\s<>:=…]", t)
        and (t.startswith(TREE) or (ROOT / "pacer" / t.split("/")[0]).is_dir())
    }  # fmt: skip
    assert paths, "no path found"
    missing = sorted(
        t for t in paths
        if not any(exists(t + end, under="pacer") for end in ("", ".py"))
    )  # fmt: skip
    assert missing == []


@pytest.mark.parametrize("page", pages(), ids=page_id)
def test_every_link_of_a_page_leads_somewhere(page: Path) -> None:
    """A relative link names a file that exists, and a heading of it where it names one."""
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, heading = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(target)
        elif heading:
            headings = re.findall(r"^#{1,6} (.+)$", linked.read_text(encoding="utf-8"),
                                  flags=re.MULTILINE)  # fmt: skip
            if heading not in {anchor(h) for h in headings}:
                broken.append(target)
    assert broken == []


def test_decisions_are_numbered_from_one_without_gaps() -> None:
    numbers = [entry.number for entry in entries()]
    twice = sorted(n for n, count in Counter(numbers).items() if count > 1)
    assert twice == [], "numbers used twice"
    assert sorted(numbers) == list(range(1, len(numbers) + 1))


def test_each_page_holds_its_entries_in_order() -> None:
    for page in decision_pages():
        numbers = [entry.number for entry in entries() if entry.page == page]
        assert numbers, f"{page.name} holds no entry"
        assert numbers == sorted(numbers), page.name


@pytest.mark.parametrize("number", list(decisions()), ids=lambda n: f"D{n}")
def test_each_decision_has_its_four_parts(number: int) -> None:
    entry = decisions()[number]
    found = re.findall(r"^- (\*[A-Z][^*]*\.\*)", entry.body, flags=re.MULTILINE)
    assert [part for part in found if part in PARTS] == list(PARTS)
    assert [part for part in found if part not in PARTS and "Superseded" not in part] == []


@pytest.mark.parametrize("number", list(decisions()), ids=lambda n: f"D{n}")
def test_each_decision_is_short(number: int) -> None:
    lines = decisions()[number].lines
    assert len(lines) <= MAX_ENTRY_LINES
    assert [line for line in lines if len(line) > MAX_LINE_CHARS] == []


def test_a_superseded_decision_names_one_that_exists() -> None:
    known = decisions()
    for number, entry in known.items():
        later = entry.superseded_by
        if later is None:
            assert "*Superseded by" not in entry.body, f"D{number}: not in its heading"
            continue
        assert later in known, f"D{number}"
        assert later != number, f"D{number}"
        assert f"*Superseded by D{later}.*" in entry.body, f"D{number} does not say why"


def test_the_index_lists_every_entry_with_its_page_and_title() -> None:
    rows = INDEX_ROW.findall(INDEX.read_text(encoding="utf-8"))
    listed = [int(row[0]) for row in rows]
    assert listed == sorted(decisions()), "the index lists each entry once, in order"
    for number, title, shown, page, heading, status in rows:
        entry = decisions()[int(number)]
        label = f"D{number}"
        assert (shown, page) == (entry.page.name, entry.page.name), label
        assert title == entry.title, label
        assert heading == anchor(f"D{number}. {entry.heading}"), label
        later = entry.superseded_by
        assert status.strip() == (f"superseded by D{later}" if later else ""), label


@pytest.mark.parametrize("page", pages(), ids=page_id)
def test_every_reference_to_a_decision_names_one(page: Path) -> None:
    known = decisions()
    text = page.read_text(encoding="utf-8")
    assert [n for n in map(int, re.findall(r"\bD(\d+)\b", text)) if n not in known] == []


def test_the_decisions_cite_only_entries_of_results() -> None:
    text = flat(" ".join(p.read_text(encoding="utf-8") for p in decision_pages()))
    cited = set(CITATION.findall(text))
    assert cited, "no citation found"
    assert sorted(cited - results_titles()) == []
    malformed = len(re.findall(r"\bRESULTS \d", text)) - len(CITATION.findall(text))
    assert malformed == 0, 'a citation not written as RESULTS <date>, "<title>"'


@pytest.mark.parametrize("page", pages(), ids=page_id)
def test_figures_live_only_in_results(page: Path) -> None:
    text = CITATION.sub("", flat(page.read_text(encoding="utf-8")))
    assert FIGURE.findall(text) == []


def test_the_figure_check_sees_figures_and_only_them() -> None:
    text = "took 2.5 s, 12 partitions/s, 3× more, 40 %; D12, 2^27, 0.95 and 2 lead times are not"
    assert FIGURE.findall(text) == ["2.5 s", "12 partitions/s", "3×", "40 %"]


def test_code_that_cites_a_page_names_what_is_there() -> None:
    """A section of the structure page cited by its heading in quotes after the page's path, a
    decision by its number after its page's path; a path into the log names a page of it."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    sections = {flat(h) for h in re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE)}
    known = decisions()
    stale = []
    code = [
        p for package in ("pacer", "gpu", "bench", "tests") for p in (ROOT / package).rglob("*.py")
    ]
    for path in [*code, ROOT / "README.md", RESULTS]:
        source = flat(path.read_text(encoding="utf-8"))
        cited = re.findall(r'docs/architecture\.md, "([^"]+)"', source)
        stale += [f"{path.name}: {s}" for s in cited if s not in sections]
        for page, number in re.findall(r"docs/decisions/([\w-]+\.md), D(\d+)", source):
            entry = known.get(int(number))
            if entry is None or entry.page.name != page:
                stale.append(f"{path.name}: {page}, D{number}")
        for named in re.findall(r"docs/decisions[\w./-]*", source):
            if not (ROOT / named.rstrip(".")).exists():
                stale.append(f"{path.name}: {named}")
    assert stale == []
