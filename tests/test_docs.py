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


def test_the_readme_optimizer_example_runs(tmp_path, monkeypatch):
    """The RS-SNGD example as printed, shortened to two steps of small batches, and its state what the comment
    says: the default recipe (rsngd-momentum) keeps 14.3 % of AdamW's state for that model."""
    text = (ROOT / "README.md").read_text()
    code = text.split("## RS-SNGD", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    assert "rsngd.create_optimizer(model.named_parameters())" in code  # the plain call: the recipe
    code = code.replace("range(1000)", "range(2)").replace("(8, 256)", "(2, 16)")
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    import rsngd

    adamw = 8 * sum(p.numel() for p in scope["model"].parameters())
    assert 0.13 * adamw < rsngd.optimizer_state_bytes(scope["opt"]) < 0.15 * adamw
    assert (tmp_path / "opt.pt").exists()
