"""The engine proposing on its own: questions for every page ranked by uncertainty (semi-automatic), and
automatic labels kept only when they pass thresholds chosen on people's answers (fully automatic)."""

from __future__ import annotations

from dataclasses import asdict

from sqlalchemy import select
from tqdm.auto import tqdm

from ...inference.mask_choice import mask_iou
from . import masks, stages, store
from .db import Database
from .model import EngineModel
from .tables import Annotation, PageRow, Task


def propose_questions(db: Database, checkpoint, bank_min_score: float = 0.5, progress: bool = True) -> dict:
    """For each page: a task per label question it shows ("What is the account number?") and per question of the
    bank that the model answers with an informative mask of predicted IoU ≥ ``bank_min_score``; every open task
    with a question gets its uncertainty as priority, so the least certain are handed out first."""
    model = EngineModel(checkpoint)
    with db.read() as s:
        page_ids = list(s.scalars(select(PageRow.id).order_by(PageRow.id)))
    added = ranked = 0
    for pid in tqdm(page_ids, desc="pages", disable=not progress):
        page = store.load_page(db, pid)
        with db.read() as s:
            have = set(s.scalars(select(Task.question).where(Task.page_id == pid)))
        for question, kind in stages.page_questions(page):
            if question in have:
                continue
            p = model.propose(page, question)
            if kind == "bank" and (not p.masks[p.best].any() or float(p.scores[p.best]) < bank_min_score):
                continue
            tid = store.add_task(db, pid, question, kind=kind)
            have.add(question)
            store.set_priority(db, tid, stages.uncertainty(p.logits, p.scores, p.best))
            added += 1
        with db.read() as s:
            open_tasks = list(
                s.execute(
                    select(Task.id, Task.question).where(
                        Task.page_id == pid, Task.status == "open", Task.question.is_not(None), Task.priority == 0
                    )
                )
            )
        for tid, question in open_tasks:
            p = model.propose(page, question)
            store.set_priority(db, tid, stages.uncertainty(p.logits, p.scores, p.best))
            ranked += 1
    return {"pages": len(page_ids), "questions_added": added, "tasks_ranked": ranked + added}


def calibrate(
    db: Database, model: EngineModel, agree: float = 0.8, target: float = 0.9, limit: int = 2000
) -> tuple[stages.Thresholds, int]:
    """Thresholds from people's answerable annotations (the model's answer vs theirs); (thresholds, questions)."""
    with db.read() as s:
        rows = list(
            s.execute(
                select(Annotation.page_id, Annotation.question, Annotation.mask)
                .where(Annotation.source == "human", Annotation.answerable.is_(True), Annotation.review != "rejected")
                .order_by(Annotation.page_id)
                .limit(limit)
            )
        )
    pred, stab, true = [], [], []
    current = None
    for pid, question, rle in rows:
        if pid != current:
            page, current = store.load_page(db, pid), pid
        p = model.propose(page, question)
        pred.append(float(p.scores[p.best]))
        stab.append(stages.stability(p.logits[p.best]))
        true.append(mask_iou(p.masks[p.best], masks.decode(rle)))
    if not rows:
        raise ValueError("no human-annotated answers to choose the thresholds on: annotate some pages first")
    return stages.choose_thresholds(pred, stab, true, agree, target), len(rows)


def autolabel(
    db: Database, checkpoint, agree: float = 0.8, target: float = 0.9, limit: int | None = None, progress: bool = True
) -> dict:
    """Label open tasks that have a question with the model's answer when its predicted IoU and stability pass the
    thresholds chosen on people's annotations; labels are marked ``machine`` and wait for review like any other."""
    model = EngineModel(checkpoint)
    version = model.version
    th, n = calibrate(db, model, agree, target)
    report = {
        "thresholds": asdict(th),
        "calibrated_on": n,
        "model_version": version,
        "agree_iou": agree,
        "target_precision": target,
    }
    if th.precision < target:  # no setting is trustworthy enough: label nothing, say why
        return report | {
            "considered": 0,
            "labelled": 0,
            "reason": f"no thresholds reach {target:.0%} agreement "
            f"with people's answers (best {th.precision:.0%}); annotate more or train the model",
        }
    with db.read() as s:
        q = select(Task.id, Task.page_id, Task.question).where(Task.status == "open", Task.question.is_not(None))
        tasks = list(s.execute(q.order_by(Task.page_id, Task.id)))
    if limit is not None:
        tasks = tasks[:limit]
    kept = considered = 0
    current = None
    for tid, pid, question in tqdm(tasks, desc="questions", disable=not progress):
        if pid != current:
            page, current = store.load_page(db, pid), pid
        p = model.propose(page, question)
        considered += 1
        passes = (
            p.masks[p.best].any()
            and float(p.scores[p.best]) >= th.min_iou
            and stages.stability(p.logits[p.best]) >= th.min_stability
        )
        if passes and store.create_machine_annotation(db, tid, p.masks[p.best], version) is not None:
            kept += 1
    return {
        "thresholds": asdict(th),
        "calibrated_on": n,
        "considered": considered,
        "labelled": kept,
        "model_version": version,
        "agree_iou": agree,
        "target_precision": target,
    }
