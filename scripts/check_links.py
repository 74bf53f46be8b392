"""Check the internal links of the built docs site and the README's links into the repository.

Usage: ``python scripts/check_links.py BUILD_DIR`` (the HTML output of sphinx-build).

- every relative ``href`` and ``src`` of every built page resolves to a file of the site,
  and its ``#anchor`` to an ``id`` in that file;
- the README (the package index's page) has no relative link: a link into the repository
  is absolute, ``https://github.com/cronrace/cronrace/blob/main/<path>`` (or ``tree`` and
  ``raw``), and every such link, in the README and in the pages' Markdown, names a path
  that exists in this checkout.

Prints one line per broken link and exits 1 if there is any. External sites are not
fetched (the suite runs offline).
"""

from __future__ import annotations

import re
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parents[1]
REPO_URL = "https://github.com/cronrace/cronrace/"
REPO_LINK = re.compile(re.escape(REPO_URL) + r"(?:blob|tree|raw)/main/([^\s)#?\"'>]+)")
MD_LINK = re.compile(r"\]\(([^)\s]+)\)|<img [^>]*src=\"([^\"]+)\"")


class Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(str(values["id"]))
        if tag == "a" and values.get("name"):
            self.ids.add(str(values["name"]))
        for attr in ("href", "src"):
            if values.get(attr) and tag in ("a", "img", "link", "script"):
                self.links.append(str(values[attr]))


def parse(path: Path) -> Links:
    parser = Links()
    parser.feed(path.read_text(encoding="utf-8", errors="replace"))
    return parser


def check_site(site: Path) -> list[str]:
    problems = []
    pages = {path: parse(path) for path in site.rglob("*.html")}
    for page, parsed in pages.items():
        for link in parsed.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or link.startswith(("mailto:", "data:")):
                continue
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if target.is_dir():
                target = target / "index.html"
            where = page.relative_to(site)
            if not target.exists():
                problems.append(f"{where}: link {link!r}: no such file in the site")
                continue
            if parts.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else parse(target).ids
                if unquote(parts.fragment) not in ids:
                    problems.append(f"{where}: link {link!r}: no anchor {parts.fragment!r}")
    return problems


def check_sources() -> list[str]:
    problems = []
    readme = ROOT / "README.md"
    sources = [readme, *sorted((ROOT / "docs").rglob("*.md"))]
    for source in sources:
        text = source.read_text(encoding="utf-8")
        name = source.relative_to(ROOT)
        for found in REPO_LINK.finditer(text):
            path = found.group(1).rstrip(".,;:")
            if not (ROOT / path).exists():
                problems.append(f"{name}: link to {path!r}: no such file in the repository")
        if source != readme:
            continue
        for found in MD_LINK.finditer(text):
            link = found.group(1) or found.group(2)
            if not urlsplit(link).scheme and not link.startswith("#"):
                problems.append(
                    f"{name}: relative link {link!r}: it breaks on the package index; "
                    f"write {REPO_URL}blob/main/..."
                )
    return problems


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    problems = check_site(Path(sys.argv[1])) + check_sources()
    for line in problems:
        print(line, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
