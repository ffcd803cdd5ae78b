"""The manual: MkDocs builds docs/ in strict mode, every relative link of README.md and of the
pages leads to a file and a heading that exist, the site gives each heading the anchor GitHub
gives it, and every path of the tree a page names exists."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from mkdocs.commands.build import build
from mkdocs.config import load_config

from tests.test_docs import TREE, anchor, backticked, exists

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
MANUAL = sorted(p for p in DOCS.rglob("*.md") if "hooks" not in p.relative_to(DOCS).parts)
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", flags=re.MULTILINE | re.DOTALL)


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def prose(page: Path) -> str:
    """The page's text without its fenced code blocks (a link or heading there is code)."""
    return FENCE.sub("", page.read_text(encoding="utf-8"))


def headings(page: Path) -> list[str]:
    """The text of every heading of ``page``, outside code blocks."""
    return [h.strip() for h in re.findall(r"^#{1,6} (.+)$", prose(page), flags=re.MULTILINE)]


def anchors(page: Path) -> set[str]:
    """The anchors of ``page``'s headings, as GitHub and the site name them (code spans as
    their text)."""
    return {anchor(h.replace("`", "")) for h in headings(page)}


class _Ids(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.ids |= {value for name, value in attrs if name == "id" and value}


def html_ids(path: Path) -> set[str]:
    parser = _Ids()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser.ids


def test_the_site_builds_in_strict_mode_with_the_anchors_links_use(tmp_path: Path) -> None:
    site = tmp_path / "site"
    config = load_config(str(ROOT / "mkdocs.yml"), strict=True, site_dir=str(site))
    build(config)  # strict: any warning (a broken link or anchor, a page left out) aborts
    missing = []
    for page in MANUAL:
        relative = page.relative_to(DOCS).with_suffix("")
        if relative.name in ("index", "README"):
            built = site / relative.parent / "index.html"
        else:
            built = site / relative / "index.html"
        assert built.exists(), f"{page_id(page)} was not built"
        missing += [f"{page_id(page)}#{a}" for a in sorted(anchors(page) - html_ids(built))]
    assert missing == [], "headings the site names otherwise than GitHub"


@pytest.mark.parametrize("page", [ROOT / "README.md", *MANUAL], ids=page_id)
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    broken = []
    for target in LINK.findall(prose(page)):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, heading = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if linked.is_dir():
            linked = linked / "README.md" if (linked / "README.md").exists() else linked
        if not linked.is_file() or (heading and heading not in anchors(linked)):
            broken.append(target)
    assert broken == []


@pytest.mark.parametrize("page", [ROOT / "README.md", *MANUAL], ids=page_id)
def test_every_path_of_the_tree_a_page_names_exists(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    named = {t.rstrip(".,:;") for t in backticked(text)}
    paths = {
        t for t in named
        if "/" in t and t.startswith(TREE) and not re.search(r"[\s<>:=…]", t)
    }  # fmt: skip
    missing = sorted(t for t in paths if not exists(t))
    assert missing == []


def test_the_readme_is_a_front_page() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300
