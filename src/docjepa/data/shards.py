"""Sharded Parquet storage of pages, and a ``torch.utils.data.Dataset`` that reads it.

A dataset is a folder of ``shard-NNNNN.parquet`` files, one row per page (schema below; images
as PNG bytes). Shards are written whole to a temporary name and renamed, so a crash never leaves
a half-written shard; rows are grouped in small row groups so random access reads little.

Reading never stops at a bad record: a shard whose footer cannot be read (truncated) is logged by name and left
out; a row group that cannot be read (a zeroed block) or a page whose image does not decode raises
:class:`RecordError` naming the shard and row, which readers log, count and skip. Page indices stay those of
the shards' metadata whatever is skipped, so (page, question) pairs found by one reader index the same pages in
another.
"""

from __future__ import annotations

import bisect
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import torch

from .record import Page

log = logging.getLogger("docjepa.data")
_ANSWER = pa.struct(
    [("regions", pa.list_(pa.list_(pa.float32()))), ("text", pa.string()), ("word_ids", pa.list_(pa.int32()))]
)
_QUESTION = pa.struct(
    [("text", pa.string()), ("kind", pa.string()), ("answers", pa.list_(_ANSWER)), ("template", pa.string())]
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


class RecordError(Exception):
    """A page (or a row group, or a whole shard) that cannot be read or decoded, with where it is."""

    def __init__(self, shard: Path | str, row: int | None, reason: str) -> None:
        self.shard, self.row, self.reason = str(shard), row, reason
        where = self.shard if row is None else f"{self.shard} row {row}"
        super().__init__(f"{where}: {reason}")


def _reason(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}".strip()


def shard_paths(root: Path | str) -> list[Path]:
    """The shard files of a dataset folder, in order."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"no dataset folder at {root}")
    return sorted(root.glob("shard-*.parquet"))


def readable_shards(roots: Path | str | Sequence[Path | str]) -> list[tuple[Path, list[int]]]:
    """(shard, rows of each row group) for every shard of ``roots`` whose footer reads; the others are logged
    by name and left out (a truncated shard is unusable as a whole)."""
    roots = [roots] if isinstance(roots, (str, Path)) else list(roots)
    out = []
    for root in roots:
        for path in shard_paths(root):
            try:
                meta = pq.ParquetFile(path).metadata
            except Exception as err:  # truncated or not Parquet at all
                log.warning("skipping unreadable shard %s (%s)", path, _reason(err))
                continue
            out.append((path, [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]))
    return out


def decode_page(row: dict, shard: Path | str, index: int) -> Page:
    """A Parquet row → :class:`Page` with its image decoded (and cached); :class:`RecordError` if it will not."""
    try:
        page = Page.from_row(row)
        page.pil()
    except Exception as err:
        raise RecordError(shard, index, _reason(err)) from err
    return page


def _log_skip(err: RecordError) -> None:
    log.warning("skipping unreadable record %s", err)


@dataclass(frozen=True)
class ShardOptions:
    """How a command writes its shards into its output folder."""

    pages_per_shard: int = 256
    """Pages per Parquet file."""
    append: bool = False
    """Add shards to a folder that already has some."""
    resume: bool = False
    """Continue an import that was killed or failed: files the folder's shards hold are passed over (importing
    only; generated pages are made again)."""


class ShardWriter:
    """Collects pages and writes them to numbered shards of ``pages_per_shard`` rows."""

    def __init__(self, out: Path | str, pages_per_shard: int = 256, append: bool = False) -> None:
        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.pages_per_shard = pages_per_shard
        for stale in self.out.glob("shard-*.parquet.tmp"):  # a shard being written when a run was killed
            stale.unlink()
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

    def add_document(self, pages: list[Page]) -> None:
        """Add all pages of one document; a shard is written only between documents, so none is split."""
        self.buffer += [p.to_row() for p in pages]
        if len(self.buffer) >= self.pages_per_shard:
            self.flush()

    def flush(self) -> None:
        if not self.buffer:
            return
        table = pa.Table.from_pylist(self.buffer, schema=SCHEMA)
        path = self.out / f"shard-{self.index:05d}.parquet"
        tmp = path.with_suffix(".parquet.tmp")
        try:
            pq.write_table(table, tmp, row_group_size=ROW_GROUP, compression="zstd")
            tmp.replace(path)
        except OSError as err:  # a full disk: the shards written before stay complete
            tmp.unlink(missing_ok=True)
            raise OSError(
                err.errno,
                f"writing {path} failed ({err.strerror or err}); {self.written} pages are safe in "
                f"{self.index} earlier shard(s)",
            ) from err
        self.index += 1
        self.written += len(self.buffer)
        self.buffer = []

    def close(self) -> None:
        self.flush()

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        elif self.buffer:  # interrupted: only whole shards, cut where an uninterrupted run cuts them, are kept
            log.warning("%d pages not yet in a shard were dropped; resume the import to add them", len(self.buffer))
            self.buffer = []


def iter_rows(
    roots: Path | str | Sequence[Path | str],
    columns: list[str] | None = None,
    on_skip: Callable[[RecordError], None] = _log_skip,
) -> Iterator[tuple[int, Path, int, dict]]:
    """(page index, shard, row in the shard, row dict of ``columns``) for every readable row of ``roots``.

    Page indices are those of :class:`DocumentDataset` over the same roots: a row group that cannot be read is
    passed to ``on_skip`` (logged by default) and its indices left unused.
    """
    index = 0
    for path, groups in readable_shards(roots):
        pf = pq.ParquetFile(path)
        row = 0
        for g, n in enumerate(groups):
            try:
                rows = pf.read_row_group(g, columns=columns).to_pylist()
            except Exception as err:
                on_skip(RecordError(path, row, f"row group {g} ({n} rows) unreadable: {_reason(err)}"))
                rows = []
            for k, r in enumerate(rows):
                yield index + k, path, row + k, r
            index += n
            row += n


def iter_pages(
    root: Path | str | Sequence[Path | str],
    columns: list[str] | None = None,
    on_skip: Callable[[RecordError], None] = _log_skip,
) -> Iterator[Page | dict]:
    """Stream every readable page of a dataset in order (as decoded ``Page``, or as dicts of ``columns`` if
    given); unreadable rows go to ``on_skip`` (logged by default)."""
    for _, path, row, r in iter_rows(root, columns, on_skip):
        if columns:
            yield r
            continue
        try:
            yield decode_page(r, path, row)
        except RecordError as err:
            on_skip(err)


class DocumentDataset(torch.utils.data.Dataset):
    """Random access to the pages of one or more dataset folders; item ``i`` is a :class:`Page` whose image is
    decoded. A page that cannot be read raises :class:`RecordError` (naming shard and row); unreadable shards
    are left out when the dataset is opened."""

    def __init__(self, roots: Path | str | list[Path | str], cache_bytes: int = 256 * 2**20) -> None:
        """``cache_bytes``: the most bytes of decoded row groups kept for reuse (least recently read dropped
        first). Training draws pages at random, so without it every page read decodes its whole row group."""
        roots = roots if isinstance(roots, list) else [roots]
        shards = readable_shards(roots)
        if not shards:
            raise FileNotFoundError(f"no readable shard-*.parquet files in {', '.join(map(str, roots))}")
        self.files = [path for path, _ in shards]
        # (file index, row group, first row of the group in its file) for each row group, and its first page.
        self.groups: list[tuple[int, int, int]] = []
        self.starts: list[int] = []
        total = 0
        for fi, (_, groups) in enumerate(shards):
            row = 0
            for g, n in enumerate(groups):
                self.groups.append((fi, g, row))
                self.starts.append(total)
                total += n
                row += n
        self.total = total
        self.cache_bytes = cache_bytes
        self._groups: OrderedDict[int, pa.Table] = OrderedDict()
        self._held = 0

    def __len__(self) -> int:
        return self.total

    def __getitem__(self, index: int) -> Page:
        if not -self.total <= index < self.total:
            raise IndexError(f"page {index} of a dataset of {self.total}")
        index %= self.total
        g = bisect.bisect_right(self.starts, index) - 1
        fi, _, first = self.groups[g]
        row = first + index - self.starts[g]
        table = self._group(g, row)
        return decode_page(table.slice(index - self.starts[g], 1).to_pylist()[0], self.files[fi], row)

    def __getstate__(self) -> dict:  # a loader's worker process starts with an empty cache
        return {**self.__dict__, "_groups": OrderedDict(), "_held": 0}

    def _group(self, g: int, row: int) -> pa.Table:
        """Row group ``g`` (of which ``row`` is wanted, for the error), from the cache or read and kept."""
        if g in self._groups:
            self._groups.move_to_end(g)
            return self._groups[g]
        fi, rg, _ = self.groups[g]
        try:
            table = pq.ParquetFile(self.files[fi]).read_row_group(rg)
        except Exception as err:
            raise RecordError(self.files[fi], row, f"row group {rg} unreadable: {_reason(err)}") from err
        self._groups[g] = table
        self._held += table.nbytes
        while self._held > self.cache_bytes and len(self._groups) > 1:
            self._held -= self._groups.popitem(last=False)[1].nbytes
        return table
