"""Sharded Parquet storage of pages, and a ``torch.utils.data.Dataset`` that reads it.

A dataset is a folder of ``shard-NNNNN.parquet`` files, one row per page (schema below; images
as PNG bytes). Shards are written whole to a temporary name and renamed, so a crash never leaves
a half-written shard; rows are grouped in small row groups so random access reads little.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import torch

from .record import Page

_ANSWER = pa.struct(
    [("regions", pa.list_(pa.list_(pa.float32()))), ("text", pa.string()), ("word_ids", pa.list_(pa.int32()))]
)
_QUESTION = pa.struct(
    [("text", pa.string()), ("qtype", pa.string()), ("answers", pa.list_(_ANSWER)), ("template", pa.string())]
)
_WORD = pa.struct([("text", pa.string()), ("box", pa.list_(pa.float32(), 4))])
SCHEMA = pa.schema(
    [
        ("doc_id", pa.string()),
        ("page", pa.int32()),
        ("width", pa.int32()),
        ("height", pa.int32()),
        ("image", pa.binary()),
        ("source", pa.string()),
        ("layout", pa.string()),
        ("words", pa.list_(_WORD)),
        ("questions", pa.list_(_QUESTION)),
    ]
)
ROW_GROUP = 16


def shard_paths(root: Path | str) -> list[Path]:
    """The shard files of a dataset folder, in order."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"no dataset folder at {root}")
    return sorted(root.glob("shard-*.parquet"))


class ShardWriter:
    """Collects pages and writes them to numbered shards of ``pages_per_shard`` rows."""

    def __init__(self, out: Path | str, pages_per_shard: int = 256, append: bool = False) -> None:
        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.pages_per_shard = pages_per_shard
        existing = shard_paths(self.out)
        if existing and not append:
            raise FileExistsError(f"{self.out} already holds {len(existing)} shards (append to it with --append)")
        self.index = int(existing[-1].stem.split("-")[1]) + 1 if existing else 0
        self.buffer: list[dict] = []
        self.written = 0

    def add(self, page: Page) -> None:
        self.buffer.append(page.to_row())
        if len(self.buffer) >= self.pages_per_shard:
            self.flush()

    def flush(self) -> None:
        if not self.buffer:
            return
        table = pa.Table.from_pylist(self.buffer, schema=SCHEMA)
        path = self.out / f"shard-{self.index:05d}.parquet"
        tmp = path.with_suffix(".parquet.tmp")
        pq.write_table(table, tmp, row_group_size=ROW_GROUP, compression="zstd")
        tmp.replace(path)
        self.index += 1
        self.written += len(self.buffer)
        self.buffer = []

    def close(self) -> None:
        self.flush()

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def iter_pages(root: Path | str, columns: list[str] | None = None) -> Iterator[Page | dict]:
    """Stream every page of a dataset in order (as ``Page``, or as dicts of ``columns`` if given)."""
    for path in shard_paths(root):
        pf = pq.ParquetFile(path)
        for i in range(pf.num_row_groups):
            for row in pf.read_row_group(i, columns=columns).to_pylist():
                yield row if columns else Page.from_row(row)


class DocumentDataset(torch.utils.data.Dataset):
    """Random access to the pages of one or more dataset folders; item ``i`` is a :class:`Page`."""

    def __init__(self, roots: Path | str | list[Path | str]) -> None:
        roots = roots if isinstance(roots, list) else [roots]
        self.files = [p for r in roots for p in shard_paths(r)]
        if not self.files:
            raise FileNotFoundError(f"no shard-*.parquet files in {', '.join(map(str, roots))}")
        # (file index, row group) for each row group, and the first global row of each.
        self.groups: list[tuple[int, int]] = []
        self.starts: list[int] = []
        total = 0
        for fi, path in enumerate(self.files):
            meta = pq.ParquetFile(path).metadata
            for g in range(meta.num_row_groups):
                self.groups.append((fi, g))
                self.starts.append(total)
                total += meta.row_group(g).num_rows
        self.total = total
        self._cache: tuple[int, list[dict]] | None = None

    def __len__(self) -> int:
        return self.total

    def __getitem__(self, index: int) -> Page:
        if not -self.total <= index < self.total:
            raise IndexError(f"page {index} of a dataset of {self.total}")
        index %= self.total
        g = bisect.bisect_right(self.starts, index) - 1
        if self._cache is None or self._cache[0] != g:
            fi, rg = self.groups[g]
            self._cache = (g, pq.ParquetFile(self.files[fi]).read_row_group(rg).to_pylist())
        return Page.from_row(self._cache[1][index - self.starts[g]])
