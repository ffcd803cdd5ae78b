"""The design docs stay true to the tree: docs/architecture.md places every module of pacer/ and
gpu/ and names only paths that exist; docs/decisions.md is numbered without gaps, gives each
decision its four parts, cites only entries bench/RESULTS.md has, and states no figure (they
live in bench/RESULTS.md); references to either page from the code name what is there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
DECISIONS = ROOT / "docs" / "decisions.md"
RESULTS = ROOT / "bench" / "RESULTS.md"
TREE = ("pacer/", "gpu/", "tests/", "bench/", "deploy/", "dashboards/", "docs/")
PARTS = ("*Decision.*", "*Context.*", "*Rejected.*", "*Evidence.*")
CITATION = re.compile(r'RESULTS (\d{4}-\d{2}-\d{2}), "([^"]+)"')
FIGURE = re.compile(
    r"(?<![\w^.])\d[\d,.]*\s?"
    r"(?:ms|µs|s|GiB|MiB|GB/s|GB|MB|KB|ns|%|×|partitions/s|a second|times)(?![\w/])"
)


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


def decisions() -> dict[int, str]:
    """Each entry of the decision log by its number: heading and body."""
    text = DECISIONS.read_text(encoding="utf-8")
    parts = re.split(r"^### D(\d+)\. ", text, flags=re.MULTILINE)
    return {int(number): body for number, body in zip(parts[1::2], parts[2::2], strict=True)}


def results_titles() -> set[tuple[str, str]]:
    found = re.findall(r"^## (\d{4}-\d{2}-\d{2}) — (.+)$", RESULTS.read_text(encoding="utf-8"),
                       flags=re.MULTILINE)  # fmt: skip
    return {(date, flat(title)) for date, title in found}


def structure_rows(section: str) -> list[tuple[str, str]]:
    """(first cell, whole row) of every table row in ``section`` of the structure page."""
    return re.findall(r"^\| (`[^|]+`) \|(.*)$", section, flags=re.MULTILINE)


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


@pytest.mark.parametrize("page", [ARCHITECTURE, DECISIONS], ids=lambda p: p.name)
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


def test_decisions_are_numbered_from_one_without_gaps() -> None:
    numbers = list(decisions())
    assert numbers == list(range(1, len(numbers) + 1))


@pytest.mark.parametrize("number", list(decisions()), ids=lambda n: f"D{n}")
def test_each_decision_has_its_four_parts(number: int) -> None:
    body = decisions()[number]
    assert [part for part in PARTS if part not in body] == []


def test_a_superseded_decision_names_one_that_exists() -> None:
    entries = decisions()
    for number, body in entries.items():
        heading = body.split("\n", 1)[0]
        for later in map(int, re.findall(r"superseded by D(\d+)", heading)):
            assert later in entries, f"D{number}"
            assert later != number, f"D{number}"
            assert f"*Superseded by D{later}.*" in body, f"D{number} does not say why"


def test_every_reference_to_a_decision_names_one() -> None:
    count = len(decisions())
    for page in (ARCHITECTURE, DECISIONS):
        for number in map(int, re.findall(r"\bD(\d+)\b", page.read_text(encoding="utf-8"))):
            assert 1 <= number <= count, f"{page.name}: D{number}"


def test_the_decisions_cite_only_entries_of_results() -> None:
    cited = set(CITATION.findall(flat(DECISIONS.read_text(encoding="utf-8"))))
    assert cited, "no citation found"
    assert sorted(cited - results_titles()) == []


@pytest.mark.parametrize("page", [ARCHITECTURE, DECISIONS], ids=lambda p: p.name)
def test_figures_live_only_in_results(page: Path) -> None:
    text = CITATION.sub("", flat(page.read_text(encoding="utf-8")))
    assert FIGURE.findall(text) == []


def test_the_figure_check_sees_figures_and_only_them() -> None:
    text = "took 2.5 s, 12 partitions/s, 3× more, 40 %; D12, 2^27, 0.95 and 2 lead times are not"
    assert FIGURE.findall(text) == ["2.5 s", "12 partitions/s", "3×", "40 %"]


def test_code_that_cites_a_page_names_what_is_there() -> None:
    """A section of the structure page cited by its heading in quotes after the page's path, a
    decision by its number after the log's path."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    sections = {flat(h) for h in re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE)}
    numbers = {f"D{n}" for n in decisions()}
    stale = []
    for package in ("pacer", "gpu", "bench", "tests"):
        for path in (ROOT / package).rglob("*.py"):
            source = flat(path.read_text(encoding="utf-8"))
            cited = re.findall(r'docs/architecture\.md, "([^"]+)"', source)
            stale += [f"{path.name}: {s}" for s in cited if s not in sections]
            cited = re.findall(r"docs/decisions\.md, (D\d+)", source)
            stale += [f"{path.name}: {d}" for d in cited if d not in numbers]
    assert stale == []
