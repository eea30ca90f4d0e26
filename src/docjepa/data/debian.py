"""Real typeset documents from Debian: the TeX Live documentation packages, fetched without installing them.

``apt-get download`` fetches the packages' ``.deb`` files (no root needed) and ``dpkg-deb -x`` unpacks them. Their
PDFs are split by a hash of each document's path below ``/usr/share/doc/texlive-doc``:

- ``bench/``: documents whose crc32 % 4 == 0, the pool the real-page benchmark's questions were drawn from
  (``docjepa benchmark real run --pdfs OUT/bench``);
- ``calib/``: one in eight of the others, never trained on: where a model's scores are calibrated;
- ``train/``: the rest, the real pages for pre-training and fine-tuning.

Each folder holds links named by the document's id (its path below the texlive-doc folder). The documentation is
under the licences of the TeX packages it describes (LPPL and others; see each package's copyright file in
``OUT/debs/usr/share/doc/<package>/copyright``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import zlib
from pathlib import Path

from ..core.errors import UsageError

PACKAGES = ("texlive-fonts-recommended-doc", "texlive-humanities-doc", "texlive-latex-recommended-doc")
"""The Debian packages whose PDFs are the real pages (those the benchmark's questions come from)."""
DOC_ROOT = Path("usr/share/doc/texlive-doc")
PARTS = ("bench", "calib", "train")
DONE = "fetched.json"


def pool(doc_id: str) -> str:
    """Which part a document (its path below the texlive-doc folder) belongs to: bench, calib or train."""
    h = zlib.crc32(doc_id.encode())
    if h % 4 == 0:
        return "bench"
    return "calib" if (h // 4) % 8 == 0 else "train"


def benchmark_pool(doc_id: str) -> bool:
    """Whether a document belongs to the benchmark's pool."""
    return pool(doc_id) == "bench"


class FetchError(UsageError):
    """The packages could not be fetched or unpacked here (no apt-get, no package lists, no network)."""


def _run(cmd: list[str], cwd: Path | None = None) -> None:
    if shutil.which(cmd[0]) is None:
        raise FetchError(f"{cmd[0]} is not installed: the real pages come from Debian packages")
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise FetchError(f"{' '.join(cmd[:2])} failed ({done.returncode}): {' / '.join(tail) or 'no output'}")


def fetch(out: Path, packages: tuple[str, ...] | list[str] = PACKAGES, debs: Path | None = None) -> dict:
    """Download (unless ``debs`` holds the .deb files already) and unpack ``packages`` into ``out``, and link their
    PDFs into ``out/bench``, ``out/calib`` and ``out/train``. Returns the count per part; a second call finds the
    work done (``out/fetched.json``). Raises :class:`FetchError` when ``apt-get download`` or ``dpkg-deb`` is
    missing or fails (then run ``apt-get update`` first, or give the .deb files)."""
    out = Path(out).resolve()
    marker = out / DONE
    if marker.is_file():
        return json.loads(marker.read_text())
    src = Path(debs).resolve() if debs else out / "downloads"
    src.mkdir(parents=True, exist_ok=True)
    if debs is None and not any(src.glob("*.deb")):
        _run(["apt-get", "download", *packages], cwd=src)
    found = sorted(src.glob("*.deb"))
    if not found:
        raise FetchError(f"no .deb files in {src}")
    tree = out / "debs"
    tree.mkdir(parents=True, exist_ok=True)
    for deb in found:
        _run(["dpkg-deb", "-x", str(deb), str(tree)])
    root = tree / DOC_ROOT
    counts = dict.fromkeys(PARTS, 0)
    for pdf in sorted(root.rglob("*.pdf")):
        doc_id = pdf.relative_to(root).as_posix()
        part = pool(doc_id)
        link = out / part / doc_id
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.is_symlink() and not link.exists():
            os.symlink(pdf, link)
        counts[part] += 1
    if not counts["train"]:
        raise FetchError(f"the packages held no PDFs below {DOC_ROOT}")
    summary = {"packages": list(packages), **counts}
    marker.write_text(json.dumps(summary) + "\n")
    return summary
