"""Deterministic, resumable data order over document shards, robust to unreadable records."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import torch

from ..data.shards import DocumentDataset
from .distributed import ONE, World, check_batch, rank_positions

log = logging.getLogger("docjepa.train")


class PositionSampler(torch.utils.data.Sampler[int]):
    """Yields sample positions start, start+1, … forever (or up to ``stop``); with several processes, this
    process's slice of each global micro-batch of ``batch_size`` positions."""

    def __init__(self, start: int = 0, stop: int | None = None, batch_size: int = 1, world: World = ONE) -> None:
        self.start, self.stop, self.batch_size, self.world = start, stop, batch_size, world

    def __iter__(self) -> Iterator[int]:
        for p in rank_positions(self.start, self.batch_size, self.world):
            if self.stop is not None and p >= self.stop:
                return
            yield p


class EpochDataset(torch.utils.data.Dataset):
    """Position p → (p, item): each epoch is a fresh seeded permutation of the items.

    Items are the pages, or (with ``pairs``) (page, question index) pairs. A record that fails to read or decode
    is logged and returned as ``None`` (the collate functions drop it, the trainer counts it), so one bad row
    never stops a run.
    """

    def __init__(self, pages: DocumentDataset, seed: int, pairs: list[tuple[int, int]] | None = None) -> None:
        self.pages, self.seed, self.pairs = pages, seed, pairs
        if pairs is not None and not pairs:
            raise ValueError("no (page, question) pairs to train on")
        self._perm: tuple[int, torch.Tensor] | None = None

    def __len__(self) -> int:
        return len(self.pages) if self.pairs is None else len(self.pairs)

    def index(self, position: int) -> int:
        epoch, offset = divmod(position, len(self))
        if self._perm is None or self._perm[0] != epoch:
            gen = torch.Generator().manual_seed(self.seed * 7919 + epoch)
            self._perm = (epoch, torch.randperm(len(self), generator=gen))
        return int(self._perm[1][offset])

    def __getitem__(self, position: int):
        i = self.index(position)
        page_index = i if self.pairs is None else self.pairs[i][0]
        try:
            page = self.pages[page_index]  # the image is decoded here, inside the skip path
        except Exception as e:  # RecordError names the shard and row; any other reader failure is skipped too
            log.warning("skipping unreadable record %s (page %d, sample position %d)", e, page_index, position)
            return position, None
        return position, (page if self.pairs is None else (page, self.pairs[i][1]))


def make_loader(dataset: EpochDataset, collate, batch_size: int, start: int, workers: int, world: World = ONE):
    """A DataLoader from sample position ``start`` (this process's share of each micro-batch of ``batch_size``);
    its own generator keeps the global RNG untouched."""
    return torch.utils.data.DataLoader(
        dataset,
        batch_size=check_batch(batch_size, world),
        sampler=PositionSampler(start, batch_size=batch_size, world=world),
        collate_fn=collate,
        num_workers=workers,
        generator=torch.Generator(),
        persistent_workers=workers > 0,
    )
