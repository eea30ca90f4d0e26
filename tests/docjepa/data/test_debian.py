"""Real documents from Debian packages: the split into benchmark, calibration and training pools, and fetching."""

import json
import shutil
import subprocess

import pytest

from docjepa.data import debian
from docjepa.data.debian import DOC_ROOT, FetchError, fetch, pool


def test_pools_split_every_document_one_way():
    ids = [f"latex/pkg{i}/doc{i}.pdf" for i in range(400)]
    parts = [pool(d) for d in ids]
    assert parts == [pool(d) for d in ids]  # by the id alone
    share = {p: parts.count(p) / len(ids) for p in debian.PARTS}
    assert 0.15 < share["bench"] < 0.35 and 0.05 < share["calib"] < 0.2 and share["train"] > 0.45  # 1/4, 3/32, 21/32
    assert all(debian.benchmark_pool(d) == (p == "bench") for d, p in zip(ids, parts))


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb is not installed")
def test_fetch_unpacks_given_packages_and_links_their_pdfs(tmp_path):
    tree = tmp_path / "pkg"
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "DEBIAN" / "control").write_text(
        "Package: fake-doc\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@example.org>\nDescription: test\n"
    )
    ids = [f"latex/p{i}/manual-{i}.pdf" for i in range(40)]
    for i, doc in enumerate(ids):
        path = tree / DOC_ROOT / doc
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"%PDF-1.4 " + str(i).encode())
    debs = tmp_path / "debs"
    debs.mkdir()
    subprocess.run(
        ["dpkg-deb", "--build", str(tree), str(debs / "fake-doc_1.0_all.deb")], check=True, capture_output=True
    )
    out = tmp_path / "out"
    summary = fetch(out, ["fake-doc"], debs=debs)
    assert sum(summary[p] for p in debian.PARTS) == len(ids) and summary["train"] > 0
    for doc in ids:
        link = out / pool(doc) / doc
        assert link.is_symlink() and link.read_bytes().startswith(b"%PDF")
        assert not any((out / p / doc).exists() for p in debian.PARTS if p != pool(doc))
    assert json.loads((out / "fetched.json").read_text()) == summary
    assert fetch(out, ["fake-doc"], debs=debs) == summary  # done once: found again


def test_fetch_says_why_when_packages_cannot_be_had(tmp_path, monkeypatch):
    monkeypatch.setattr(debian.shutil, "which", lambda name: None)
    with pytest.raises(FetchError, match="apt-get is not installed"):
        fetch(tmp_path / "out")
    monkeypatch.undo()
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FetchError, match=r"no \.deb files"):
        fetch(tmp_path / "out2", debs=empty)
