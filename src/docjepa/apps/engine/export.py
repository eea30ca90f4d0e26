"""``docjepa engine export``: annotations out of the database as COCO (RLE masks), JSON lines, or the project's
Parquet shards that ``docjepa finetune`` reads, split by document into ``train/`` and ``val/``."""

from __future__ import annotations

import json
import zlib
from collections import defaultdict
from pathlib import Path

from sqlalchemy import select

from ...data.kinds import canonical
from ...data.record import Answer, Question
from ...data.shards import ShardWriter
from . import masks
from .db import Database
from .store import page_record
from .tables import Annotation, PageRow, Task, User

FORMATS = ("coco", "shards", "jsonl")
DEFAULT_REVIEWS = ("pending", "approved")
"""Annotations exported by default: all but those a reviewer rejected."""


def _rows(db: Database, reviews: tuple[str, ...], sources: tuple[str, ...]):
    with db.read() as s:
        q = select(Annotation).where(Annotation.review.in_(reviews), Annotation.source.in_(sources))
        anns = list(s.scalars(q.order_by(Annotation.id)))
        page_ids = sorted({a.page_id for a in anns})
        pages = {p.id: p for p in s.scalars(select(PageRow).where(PageRow.id.in_(page_ids)))} if page_ids else {}
        tasks = {t.id: t for t in s.scalars(select(Task).where(Task.id.in_([a.task_id for a in anns])))} if anns else {}
        users = dict(s.execute(select(User.id, User.name)).all())
    return anns, pages, tasks, users


def _meta(a: Annotation, users: dict[int, str]) -> dict:
    return {
        "question": a.question,
        "answerable": a.answerable,
        "annotator": users.get(a.user_id, str(a.user_id)),
        "model_version": a.model_version,
        "outcome": a.outcome,
        "accepted_candidate": a.candidate if a.outcome in ("accepted", "refined") else None,
        "started_from_candidate": a.candidate,
        "proposal_id": a.proposal_id,
        "clicks": a.clicks,
        "seconds": a.seconds,
        "edits": a.edits,
        "review": a.review,
        "version": a.version,
        "source": a.source,
    }


def held_out_docs(doc_ids: list[str], fraction: float) -> set[str]:
    """Documents of the validation part: crc32 of the id below ``fraction`` of the range (stable as data grows);
    with two or more documents each part gets at least one."""
    docs = sorted(set(doc_ids))
    val = {d for d in docs if zlib.crc32(d.encode()) / 2**32 < fraction}
    if len(docs) >= 2 and fraction > 0:
        if not val:
            val = {min(docs, key=lambda d: zlib.crc32(d.encode()))}
        if val == set(docs):
            val.discard(max(docs, key=lambda d: zlib.crc32(d.encode())))
    return val


def export(
    db: Database,
    fmt: str,
    out: Path,
    reviews: tuple[str, ...] = DEFAULT_REVIEWS,
    val_fraction: float = 0.2,
    sources: tuple[str, ...] = ("human", "machine"),
) -> dict:
    """``sources``: people's annotations (``human``) and/or automatic labels (``machine``)."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    anns, pages, tasks, users = _rows(db, reviews, sources)
    out.mkdir(parents=True, exist_ok=True)
    if fmt == "coco":
        return _coco(anns, pages, users, out)
    if fmt == "jsonl":
        path = out / "annotations.jsonl"
        with open(path, "w") as f:
            for a in anns:
                p = pages[a.page_id]
                row = {"id": a.id, "doc_id": p.doc_id, "page": p.page_no, "width": p.width, "height": p.height}
                row |= _meta(a, users) | {
                    "mask": a.mask,
                    "word_ids": a.word_ids,
                    "kind": canonical(tasks[a.task_id].kind or "user"),
                }
                f.write(json.dumps(row) + "\n")
        return {"format": fmt, "annotations": len(anns), "file": str(path)}
    return _shards(anns, pages, tasks, out, val_fraction)


def _coco(anns, pages, users, out: Path) -> dict:
    images_dir = out / "images"
    images_dir.mkdir(exist_ok=True)
    images, annotations, unanswerable = [], [], []
    for pid, p in sorted(pages.items()):
        name = f"{pid:08d}.png"
        (images_dir / name).write_bytes(p.image)
        images.append(
            {
                "id": pid,
                "file_name": f"images/{name}",
                "width": p.width,
                "height": p.height,
                "doc_id": p.doc_id,
                "page": p.page_no,
            }
        )
    for a in anns:
        if not a.answerable:
            unanswerable.append({"id": a.id, "image_id": a.page_id} | _meta(a, users))
            continue
        annotations.append(
            {
                "id": a.id,
                "image_id": a.page_id,
                "category_id": 1,
                "segmentation": a.mask,
                "area": masks.area(a.mask),
                "bbox": masks.bbox(a.mask),
                "iscrowd": 0,
                "word_ids": a.word_ids,
            }
            | _meta(a, users)
        )
    coco = {
        "info": {"description": "Document-JEPA data engine export: answer regions of questions about pages"},
        "images": images,
        "annotations": annotations,
        "categories": [{"id": 1, "name": "answer"}],
        "unanswerable": unanswerable,
    }
    path = out / "annotations.json"
    path.write_text(json.dumps(coco))
    return {
        "format": "coco",
        "images": len(images),
        "annotations": len(annotations),
        "unanswerable": len(unanswerable),
        "file": str(path),
    }


def _shards(anns, pages, tasks, out: Path, val_fraction: float) -> dict:
    """Pages with their answerable questions; each answer's regions are an exact rectangle cover of its mask.
    Questions marked not answerable are left out (page records hold answer regions only)."""
    by_page: dict[int, list[Annotation]] = defaultdict(list)
    for a in anns:
        if a.answerable:
            by_page[a.page_id].append(a)
    val_docs = held_out_docs([pages[p].doc_id for p in by_page], val_fraction)
    counts = {"train": [0, 0], "val": [0, 0]}
    writers = {part: ShardWriter(out / part) for part in ("train", "val")}
    try:
        for pid in sorted(by_page, key=lambda i: (pages[i].doc_id, pages[i].page_no)):
            row = pages[pid]
            page = page_record(row)
            words, questions = page.words, page.questions
            for a in by_page[pid]:
                regions = masks.to_polygons(masks.decode(a.mask))
                text = " ".join(words[i].text for i in a.word_ids if i < len(words))
                questions.append(
                    Question(
                        a.question,
                        canonical(tasks[a.task_id].kind or "user"),
                        [Answer(regions, text, list(a.word_ids))],
                    )
                )
            part = "val" if row.doc_id in val_docs else "train"
            writers[part].add(page)
            counts[part][0] += 1
            counts[part][1] += len(questions)
    finally:
        for w in writers.values():
            w.close()
    return {
        "format": "shards",
        "train": {"pages": counts["train"][0], "questions": counts["train"][1], "folder": str(out / "train")},
        "val": {"pages": counts["val"][0], "questions": counts["val"][1], "folder": str(out / "val")},
        "validation_documents": sorted(val_docs),
    }
