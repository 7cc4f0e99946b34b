"""The docs site builds with ``mkdocs build --strict``: every page is in the nav, every link
and anchor resolves. A copy with one page left out of the nav, or one broken link, fails."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

MKDOCS = Path(sys.executable).parent / "mkdocs"


def build(root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(MKDOCS), "build", "--strict", "-f", str(root / "mkdocs.yml"), "-d", str(site)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )


def copy_site(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(REPO / "docs", root / "docs")
    shutil.copy(REPO / "mkdocs.yml", root / "mkdocs.yml")
    return root


def test_the_docs_site_builds_strictly(tmp_path: Path) -> None:
    done = build(REPO, tmp_path / "site")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "site" / "concepts" / "quota-tree" / "index.html").exists()


@pytest.mark.parametrize(
    ("page", "text", "complaint"),
    [
        ("stray.md", "# A page no nav names\n", 'not included in the "nav"'),
        ("concepts/queues.md", "\n[gone](no-such-page.md)\n", "no-such-page.md"),
        ("concepts/queues.md", "\n[gone](quota-tree.md#no-such-anchor)\n", "no-such-anchor"),
    ],
)
def test_a_missing_page_or_broken_link_fails_the_build(
    tmp_path: Path, page: str, text: str, complaint: str
) -> None:
    root = copy_site(tmp_path)
    with (root / "docs" / page).open("a", encoding="utf-8") as out:
        out.write(text)
    done = build(root, tmp_path / "site")
    assert done.returncode != 0
    assert complaint in done.stderr
