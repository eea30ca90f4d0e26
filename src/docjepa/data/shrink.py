"""A dataset's pages stored at the size a model reads them: the same rows, smaller images.

A model of input side ``S`` sees a page resized so its longer side is ``S`` (:func:`~docjepa.data.frame.fit_scale`,
the collator's fit). :func:`shrink` stores each image already at that size, losslessly (PNG; greyscale where the
resized page has no colour), and keeps everything else of the row (page size, words, boxes, questions, answers)
as it was: boxes and answer regions stay in the page's own pixels, and the collator resizes from the page's width
and height, not from the image's. A page placed at its fitted size (no zoom jitter) is then the very same input
tensor as from the original (tested); a page drawn smaller is resampled from the stored image. Real pages imported
at 72 dpi shrink about sevenfold for a 256-px model, which is what lets them travel to a machine that can carry
little (``benchmarks/scripts/gpu_carry.py``).

    docjepa shrink runs/demo/data/real-train --side 256 --out runs/real-train-256
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from .frame import fit_scale
from .shards import ROW_GROUP, SCHEMA, readable_shards

log = logging.getLogger("docjepa.data")
MANIFEST = "shrunk.json"
"""Written into the output folder: the side the images were fitted to and what was kept."""


def fitted_image(image: bytes, width: int, height: int, side: int) -> bytes:
    """``image`` (PNG or JPEG bytes of a ``width`` × ``height`` page) resized as the collator fits a page into a
    square of ``side`` (bilinear, longer side ``side``), as PNG; greyscale when all three channels are equal.
    An image already no larger than that is kept as it is."""
    s = fit_scale(width, height, side)
    size = (max(1, round(width * s)), max(1, round(height * s)))
    with Image.open(io.BytesIO(image)) as img:
        if img.size[0] <= size[0] and img.size[1] <= size[1]:
            return image
        rgb = img.convert("RGB").resize(size, Image.BILINEAR)
    arr = np.asarray(rgb)
    grey = bool((arr[..., 0] == arr[..., 1]).all() and (arr[..., 1] == arr[..., 2]).all())
    buf = io.BytesIO()
    (Image.fromarray(arr[..., 0]) if grey else rgb).save(buf, "PNG", optimize=True)
    return buf.getvalue()


def _rows(path: Path, groups: list[int], skipped: list[int]):
    """The rows of one shard; a row group that cannot be read is logged and passed over."""
    pf = pq.ParquetFile(path)
    for g, n in enumerate(groups):
        try:
            yield from pf.read_row_group(g).to_pylist()
        except Exception as err:  # a damaged block: the rest of the shard is still worth having
            log.warning("%s: row group %d (%d pages) unreadable, left out: %s", path, g, n, err)
            skipped.append(n)


def shrink(
    roots: Path | str | Sequence[Path | str],
    out: Path | str,
    side: int,
    questions_only: bool = False,
    progress: bool = True,
) -> dict:
    """Every readable page of ``roots`` into ``out`` (one output shard per input shard, rows in order) with its
    image fitted to ``side`` (:func:`fitted_image`); ``questions_only`` keeps only pages that ask something (all a
    fine-tuning run reads). Returns (and writes to ``out/shrunk.json``) pages, questions and bytes before/after."""
    from tqdm.auto import tqdm

    if side < 16:
        raise ValueError(f"side must be at least 16 pixels, not {side}")
    out = Path(out)
    if out.exists() and any(out.glob("shard-*.parquet")):
        raise FileExistsError(f"{out} already holds shards: shrink into an empty folder")
    shards = readable_shards(roots)
    if not shards:
        raise FileNotFoundError(f"no readable shard-*.parquet files in {roots}")
    out.mkdir(parents=True, exist_ok=True)
    summary = {"side": side, "questions_only": questions_only, "pages": 0, "dropped": 0, "questions": 0}
    before = after = 0
    skipped: list[int] = []
    bar = tqdm(total=sum(sum(groups) for _, groups in shards), desc="shrink", unit="page", disable=not progress)
    for index, (path, groups) in enumerate(shards):
        rows = []
        for row in _rows(path, groups, skipped):
            bar.update(1)
            if questions_only and not row["questions"]:
                summary["dropped"] += 1
                continue
            before += len(row["image"])
            row["image"] = fitted_image(row["image"], row["width"], row["height"], side)
            after += len(row["image"])
            summary["questions"] += len(row["questions"])
            rows.append(row)
        if rows:
            target = out / f"shard-{index:05d}.parquet"
            tmp = target.with_suffix(".parquet.tmp")
            table = pa.Table.from_pylist(rows, schema=SCHEMA)
            pq.write_table(table, tmp, row_group_size=ROW_GROUP, compression="zstd", compression_level=19)
            tmp.replace(target)
            summary["pages"] += len(rows)
    bar.close()
    summary.update(
        unreadable=sum(skipped),
        image_bytes_before=before,
        image_bytes_after=after,
        sources=[str(p) for p, _ in shards],
        bytes=sum(f.stat().st_size for f in out.glob("shard-*.parquet")),
    )
    (out / MANIFEST).write_text(json.dumps(summary, indent=1) + "\n")
    log.info("%d pages into %s: images %.1f → %.1f MiB", summary["pages"], out, before / 2**20, after / 2**20)
    return summary
