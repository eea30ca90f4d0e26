"""Fetch the real-page benchmark's PDFs (TeX Live documentation packages from Debian) and split them.

    python benchmarks/scripts/real_pdfs.py --out data/real-pdfs

downloads the packages with ``apt-get download`` (no installation, no root needed), unpacks them with
``dpkg-deb -x`` into ``OUT/debs/``, and makes two folders of links below ``OUT``: ``bench/`` (documents whose path
under ``/usr/share/doc/texlive-doc`` has crc32 % 4 == 0: the pool the benchmark's questions were drawn from) and
``train/`` (all others: the real pages for pre-training, fine-tuning and calibration). A document's id is its
path below either folder, the same as below ``/usr/share/doc/texlive-doc``, so
``docjepa benchmark real run benchmarks/real/questions.json --pdfs OUT/bench`` finds every benchmark document
(their SHA-256 digests are checked). The documentation is under the licences of the TeX packages it describes (LPPL
and others; see each package's copyright file in ``OUT/debs/usr/share/doc/<package>/copyright``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import zlib
from pathlib import Path

PACKAGES = ["texlive-fonts-recommended-doc", "texlive-humanities-doc", "texlive-latex-recommended-doc"]
DOC_ROOT = Path("usr/share/doc/texlive-doc")


def benchmark_pool(doc_id: str) -> bool:
    """Whether a document (path below the texlive-doc folder) belongs to the benchmark's pool."""
    return zlib.crc32(doc_id.encode()) % 4 == 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--packages", nargs="+", default=PACKAGES)
    ap.add_argument("--debs", type=Path, default=None, help="use .deb files already in this folder")
    args = ap.parse_args()
    out = args.out.resolve()
    debs = (args.debs or out / "downloads").resolve()
    debs.mkdir(parents=True, exist_ok=True)
    if args.debs is None:
        subprocess.run(["apt-get", "download", *args.packages], cwd=debs, check=True)
    tree = out / "debs"
    tree.mkdir(parents=True, exist_ok=True)
    for deb in sorted(debs.glob("*.deb")):
        subprocess.run(["dpkg-deb", "-x", str(deb), str(tree)], check=True)
    root = tree / DOC_ROOT
    counts = {"bench": 0, "train": 0}
    for pdf in sorted(root.rglob("*.pdf")):
        doc_id = pdf.relative_to(root).as_posix()
        part = "bench" if benchmark_pool(doc_id) else "train"
        link = out / part / doc_id
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.exists():
            os.symlink(pdf, link)
        counts[part] += 1
    print(json.dumps({"out": str(out), **counts}))


if __name__ == "__main__":
    main()
