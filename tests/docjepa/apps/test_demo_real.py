"""The demo's real pages when they cannot be fetched: a message, not a failure."""

from docjepa.apps import demo_real
from docjepa.data.debian import FetchError


def test_a_machine_without_the_packages_gets_a_message(tmp_path, monkeypatch):
    def refuse(out):
        raise FetchError("apt-get download failed (100): E: Unable to locate package texlive-humanities-doc")

    monkeypatch.setattr(demo_real, "fetch", refuse)
    found = demo_real.real_pages("debian", tmp_path, max_pages=2, progress=False)
    assert isinstance(found, str) and "Unable to locate package" in found and "apt-get update" in found
    assert "synthetic pages only" in found
