"""Deterministic, resumable data order over document shards, robust to unreadable records."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import torch

from ..data.shards import DocumentDataset

log = logging.getLogger("docjepa.train")


class PositionSampler(torch.utils.data.Sampler[int]):
    """Yields sample positions start, start+1, … forever (or up to ``stop``)."""

    def __init__(self, start: int = 0, stop: int | None = None) -> None:
        self.start, self.stop = start, stop

    def __iter__(self) -> Iterator[int]:
        p = self.start
        while self.stop is None or p < self.stop:
            yield p
            p += 1


class EpochDataset(torch.utils.data.Dataset):
    """Position p → (p, page): each epoch is a fresh seeded permutation of the pages.

    A record that fails to decode is logged and returned as ``None`` (the collate function drops it), so one
    bad row never stops a run.
    """

    def __init__(self, pages: DocumentDataset, seed: int) -> None:
        self.pages, self.seed = pages, seed
        self._perm: tuple[int, torch.Tensor] | None = None

    def __len__(self) -> int:
        return len(self.pages)

    def index(self, position: int) -> int:
        epoch, offset = divmod(position, len(self.pages))
        if self._perm is None or self._perm[0] != epoch:
            gen = torch.Generator().manual_seed(self.seed * 7919 + epoch)
            self._perm = (epoch, torch.randperm(len(self.pages), generator=gen))
        return int(self._perm[1][offset])

    def __getitem__(self, position: int):
        i = self.index(position)
        try:
            return position, self.pages[i]
        except Exception as e:
            log.warning("skipping unreadable page %d (sample position %d): %s: %s", i, position, type(e).__name__, e)
            return position, None


def make_loader(dataset: EpochDataset, collate, batch_size: int, start: int, workers: int):
    """A DataLoader from sample position ``start``; its own generator keeps the global RNG untouched."""
    return torch.utils.data.DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=PositionSampler(start),
        collate_fn=collate,
        num_workers=workers,
        generator=torch.Generator(),
        persistent_workers=workers > 0,
    )
