"""Fetch the real-page benchmark's PDFs (TeX Live documentation packages from Debian) and split them.

    python benchmarks/scripts/real_pdfs.py --out data/real-pdfs

``docjepa.data.debian.fetch``: ``apt-get download`` (no installation, no root needed), ``dpkg-deb -x`` into
``OUT/debs/``, and three folders of links below ``OUT``: ``bench/`` (the pool the benchmark's questions were drawn
from), ``calib/`` (held out for calibration) and ``train/`` (the real pages to train on). ``docjepa demo`` does the
same by itself; this script is for the recipes in docs/docjepa-real.md.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from docjepa.data.debian import PACKAGES, fetch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--packages", nargs="+", default=list(PACKAGES))
    ap.add_argument("--debs", type=Path, default=None, help="use .deb files already in this folder")
    args = ap.parse_args()
    print(json.dumps({"out": str(args.out), **fetch(args.out, args.packages, args.debs)}))


if __name__ == "__main__":
    main()
