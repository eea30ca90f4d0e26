"""The front page and the docs link to things that exist (``make docs`` checks the docs site in full, anchors
included; this catches a broken README link or image in the fast suite)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def local_targets(md: Path) -> list[tuple[str, Path]]:
    out = []
    for target in LINK.findall(md.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        out.append((target, (md.parent / target.split("#", 1)[0]).resolve()))
    return out


def test_every_local_link_and_image_resolves():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    missing = [f"{md.name}: {t}" for md in pages for t, path in local_targets(md) if not path.exists()]
    assert missing == []
    assert len(local_targets(ROOT / "README.md")) >= 8  # the check saw the README's links


def test_the_readme_is_a_front_page():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 150
    assert any("make test" in line for line in lines)  # the test command CI runs
