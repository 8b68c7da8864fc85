"""The README's documentation list names every page in docs/ (issue #32, item 5).

A page missing from the list is a page a newcomer does not find; the map
(``docs/architecture.md``) is one of them.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_every_docs_page_is_linked_from_the_readme() -> None:
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Documentation", 1)[1].split("\n## ", 1)[0]
    linked = set(re.findall(r"\]\((docs/[^)#]+\.md)\)", section))
    pages = {str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md")}
    assert pages - linked == set(), "add each page to README.md's Documentation list"
    assert linked - pages == set(), "the list links a page that does not exist"
    assert "docs/architecture.md" in linked
