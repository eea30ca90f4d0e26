"""Proposal stages, retraining rounds and the server's switch to a promoted model."""

import threading

import numpy as np
import pytest
import torch

from docjepa.data.record import Page, Word

from .conftest import client_for, make_engine, word_mask


def _page(words):
    return Page("d", 0, 400, 300, b"", [Word(t, b) for t, b in words], "t")


def test_questions_from_the_page_and_the_bank():
    from docjepa.apps.engine import stages

    page = _page(
        [
            ("Patient", (10, 10, 80, 30)),
            ("Registration", (85, 10, 200, 30)),
            ("Account", (10, 50, 60, 60)),
            ("number:", (62, 50, 110, 60)),
            ("CX-12", (120, 50, 170, 60)),
            ("Date:", (200, 50, 240, 60)),
            ("10/2/2023", (245, 50, 300, 60)),
            ("Total", (10, 90, 50, 100)),
            ("12:30", (60, 90, 90, 100)),
        ]
    )
    assert stages.page_labels(page) == ["account number", "date"]  # "12:30" ends in a digit, not a colon label
    qs = stages.page_questions(page)
    assert qs[:2] == [("What is the account number?", "key"), ("What is the date?", "key")]
    bank = stages.question_bank()
    assert "Where is the signature?" in bank and all("{" not in q for q in bank)
    assert "How much do I owe?" in bank and "Total" not in bank  # a template's first three extra wordings, not all
    assert [q for q, k in qs if k == "bank"] == bank


def test_uncertainty_ranks_disagreeing_and_low_scored_proposals_first_and_stability_on_hand_made_logits():
    from docjepa.apps.engine import stages

    agree = torch.full((3, 8, 8), -5.0)
    agree[:, 2:5, 2:6] = 5.0
    disagree = torch.full((3, 8, 8), -5.0)
    disagree[0, 0:2, 0:2], disagree[1, 5:8, 5:8], disagree[2, 2:5, 2:6] = 5.0, 5.0, 5.0
    assert stages.pairwise_disagreement(agree > 0) == 0.0 and stages.pairwise_disagreement(disagree > 0) == 1.0
    sure = stages.uncertainty(agree, torch.tensor([0.9, 0.8, 0.7]), 0)
    unsure = stages.uncertainty(agree, torch.tensor([0.3, 0.2, 0.1]), 0)
    torn = stages.uncertainty(disagree, torch.tensor([0.9, 0.8, 0.7]), 0)
    assert sure == pytest.approx(0.1) and unsure == pytest.approx(0.7) and torn == pytest.approx(1.1)
    sharp = agree[0]
    soft = torch.full((8, 8), -5.0)
    soft[2:5, 2:6] = 0.5  # above 0 but within the offset: the mask vanishes when the threshold moves up
    soft[2:4, 2:4] = 3.0
    assert stages.stability(sharp) == 1.0
    assert stages.stability(soft) == pytest.approx(4 / 12)
    assert stages.stability(torch.full((8, 8), -5.0)) == 0.0


def test_thresholds_keep_the_most_labels_at_the_target_agreement():
    from docjepa.apps.engine import stages

    rng = np.random.default_rng(0)
    pred = rng.uniform(0, 1, 400)
    stab = rng.uniform(0, 1, 400)
    true = np.where(pred > 0.6, 0.9, 0.3) * np.where(stab > 0.2, 1.0, 0.5)  # agree only when both are high
    th = stages.choose_thresholds(pred, stab, true, agree=0.8, target=0.9)
    keep = (pred >= th.min_iou) & (stab >= th.min_stability)
    assert th.precision >= 0.9 and np.mean(true[keep] >= 0.8) == pytest.approx(th.precision)
    assert th.coverage == pytest.approx(keep.mean()) and th.coverage > 0.25  # the clean region is 0.32 of the data
    impossible = stages.choose_thresholds(pred, stab, np.zeros(400))
    assert impossible.precision == 0.0  # reported as measured, not forced


def _zero_decoder(src, dst):
    """A copy of a model whose masks are empty and whose word decoder prefers no word and rules out every word (its
    answers fall back to the page's first word alone): a worse model than one that reads the page."""
    import shutil

    from docjepa.modeling.segmentation import DocJepaForSegmentation

    shutil.copytree(src, dst)
    model = DocJepaForSegmentation.from_pretrained(dst)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "output_hypernetworks_mlps" in name or name.startswith("word_decoder.logit."):
                p.fill_(-10.0 if name == "word_decoder.logit.bias" else 0.0)
    model.save_pretrained(dst)
    return dst


def test_retrain_promotes_only_a_better_model(tmp_path, docs, tiny_model):
    from docjepa.apps.engine import store
    from docjepa.apps.engine.model import EngineModel
    from docjepa.apps.engine.retrain import list_rounds, retrain, serving_checkpoint
    from docjepa.apps.engine.tables import Setting

    db = make_engine(f"sqlite:///{tmp_path / 'e.db'}", docs, pages=10, users=("ann",))
    empty = _zero_decoder(tiny_model, tmp_path / "empty-model")
    ann = store.list_users(db)[0]
    while (task := store.claim_next(db, ann["id"])) is not None:  # answers: the page's second and third words
        store.create_annotation(
            db, task["id"], ann["id"], store.Answer(task["question"], True, word_mask(task["page"], [1, 2]))
        )
    with db.write() as s:
        s.merge(Setting(key="checkpoint", value=str(tiny_model)))

    def train_to(model):
        return lambda serving, data, out: model

    worse = retrain(db, tmp_path / "r1", train=train_to(empty), val_fraction=0.3)
    assert worse["after"]["mIoU"] < worse["before"]["mIoU"] and worse["promoted"] is False
    assert serving_checkpoint(db) == str(tiny_model)  # kept out
    with db.write() as s:
        s.merge(Setting(key="checkpoint", value=str(empty)))
    better = retrain(db, tmp_path / "r2", train=train_to(tiny_model), val_fraction=0.3)
    assert better["promoted"] is True and serving_checkpoint(db) == str(tiny_model.resolve())
    val = tmp_path / "r2" / "data" / "val"
    assert better["before"]["mIoU"] == pytest.approx(EngineModel(empty, device="cpu").score(val)["mIoU"])
    rows = list_rounds(db)
    assert [(r["status"], r["promoted"]) for r in rows] == [("done", False), ("done", True)]
    assert rows[0]["report"]["data"]["train"]["questions"] > 0 and rows[0]["report"]["data"]["val"]["questions"] > 0
    with pytest.raises(Exception, match="not empty"):
        retrain(db, tmp_path / "r2", train=train_to(tiny_model))
    db.dispose()


def test_the_server_switches_to_a_promoted_model_without_dropping_a_request(tmp_path, docs, tiny_model, tiny_proposer):
    from docjepa.apps.engine.app import ServerConfig, create_app
    from docjepa.apps.engine.model import model_version
    from docjepa.apps.engine.proposer import Proposer
    from docjepa.apps.engine.tables import Setting

    url = f"sqlite:///{tmp_path / 'e.db'}"
    db = make_engine(url, docs, pages=4, users=("ann", "bob"))
    other = _zero_decoder(tiny_model, tmp_path / "next-model")
    proposer = Proposer(tiny_model, device="cpu", threads=1)
    app = create_app(ServerConfig(db=url, follow_seconds=0.0), proposer=proposer)
    with db.write() as s:
        s.merge(Setting(key="checkpoint", value=str(tiny_model)))
    clients = [client_for(app, n) for n in ("ann", "bob")]
    tasks = [c.post("/api/tasks/next").json() for c in clients]
    seen: list[tuple[int, int, str]] = []
    errors: list = []

    def ask(i: int) -> None:
        for k in range(8):
            r = clients[i].post(f"/api/tasks/{tasks[i]['id']}/propose", json={"question": tasks[i]["question"]})
            if r.status_code != 200:
                errors.append(r.text)
            else:
                seen.append((i, k, r.json()["model_version"]))

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    with db.write() as s:  # a round promotes another model while proposals are in flight
        s.merge(Setting(key="checkpoint", value=str(other)))
    for t in threads:
        t.join()
    r = clients[0].post(f"/api/tasks/{tasks[0]['id']}/propose", json={"question": tasks[0]["question"]})
    assert errors == [] and len(seen) == 16  # no request dropped
    new = model_version(other)
    assert r.json()["model_version"] == new != model_version(tiny_model)
    assert {v for *_, v in seen} <= {new, model_version(tiny_model)}
    proposer.close()
    db.dispose()


def test_semi_automatic_questions_are_ranked_and_automatic_labels_follow_the_thresholds(tmp_path, docs, tiny_model):
    from docjepa.apps.engine import automation, store
    from docjepa.apps.engine.app import ServerConfig, create_app
    from docjepa.apps.engine.model import candidate_masks
    from docjepa.inference.predictor import DocumentPredictor

    url = f"sqlite:///{tmp_path / 'e.db'}"
    db = make_engine(url, docs, pages=4, users=("ann", "rev"))
    before = store.counts(db)["tasks_open"]
    from sqlalchemy import func, select

    from docjepa.apps.engine.tables import Task

    with db.read() as s:
        old = set(s.scalars(select(Task.id)))
    out = automation.propose_questions(db, tiny_model, bank_min_score=2.0, progress=False)  # no bank question passes
    assert out["questions_added"] > 0 and store.counts(db)["tasks_open"] == before + out["questions_added"]
    ann = store.list_users(db)[0]
    first = store.claim_next(db, ann["id"])
    with db.read() as s:
        top = s.scalar(select(func.max(Task.priority)).where(Task.status == "open"))
        kinds = set(s.scalars(select(Task.kind).where(Task.id.not_in(old))))
    assert kinds == {"key"} and top > 0  # the labels' questions (no bank question passed)
    with db.read() as s:
        assert s.get(Task, first["id"]).priority == top  # the least certain first

    # People annotate some questions: first exactly as the model answers, so its labels can be trusted ...
    predictor = DocumentPredictor.from_pretrained(tiny_model, device="cpu")
    for _ in range(12):
        task = store.claim_next(db, ann["id"])
        page = store.load_page(db, task["page_id"])
        predictor.set_page(page)
        _, _, best, full = candidate_masks(predictor, page, task["question"])
        mask = full[best] if full[best].any() else word_mask(task["page"], [0])
        store.create_annotation(db, task["id"], ann["id"], store.Answer(task["question"], True, mask))
    trusted = automation.autolabel(db, tiny_model, limit=6, progress=False)
    assert trusted["thresholds"]["precision"] >= 0.9 and trusted["labelled"] >= 1
    machine = store.next_for_review(db, store.list_users(db)[1], source="machine")
    assert machine["source"] == "machine" and machine["review"] == "pending" and machine["edits"] == 0
    app = create_app(ServerConfig(db=url), proposer=None)
    rev = client_for(app, "rev")
    assert rev.get("/api/review/next?source=machine").json()["source"] == "machine"
    assert rev.get("/api/review/next?source=robot").status_code == 422
    # ... then a reviewer finds people disagreeing with the model everywhere: no label passes any more.
    from docjepa.apps.engine import masks
    from docjepa.apps.engine.tables import Annotation

    with db.write() as s:
        for a in s.scalars(select(Annotation).where(Annotation.source == "human")):
            page = store.page_info(db, a.page_id)
            a.mask = masks.encode(word_mask(page, [len(page["words"]) - 1]))
    refused = automation.autolabel(db, tiny_model, limit=6, progress=False)
    assert refused["labelled"] == 0 and "no thresholds reach" in refused["reason"]
    assert db.integrity_problems() == []
    db.dispose()


def test_retrain_from_the_page_is_for_admins_and_runs_in_a_child_process(tmp_path, docs):
    import time

    from docjepa.apps.engine.app import ServerConfig, create_app

    url = f"sqlite:///{tmp_path / 'e.db'}"
    make_engine(url, docs, pages=1, users=("rev", "boss")).dispose()
    app = create_app(ServerConfig(db=url, rounds_dir=str(tmp_path / "rounds")), proposer=None)
    assert client_for(app, "rev").post("/api/retrain", json={"steps": 5}).status_code == 403
    r = client_for(app, "boss").post("/api/retrain", json={"steps": 5})
    assert r.status_code == 200, r.text
    log = tmp_path / "rounds" / (r.json()["out"].rsplit("/", 1)[-1] + ".log")
    for _ in range(600):  # this database has no serving model: the child says so and stops
        if "no serving model" in (log.read_text() if log.exists() else ""):
            break
        time.sleep(0.1)
    assert "no serving model" in log.read_text()
    assert client_for(app, "rev").get("/api/rounds").json() == []
