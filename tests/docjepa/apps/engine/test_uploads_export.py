"""Uploads (size, content sniffing, generated names, corrupt files), exports (COCO with RLE, JSON lines, shards
split by document), the exact rectangle cover of masks, the dashboard figures and the command line."""

import io
import json
from pathlib import Path

import numpy as np
import pytest

from .conftest import PASSWORD, client_for, make_engine, word_mask


def _pdf(text_lines: list[str]) -> bytes:
    pytest.importorskip("reportlab")
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    buf = io.BytesIO()
    c = canvas.Canvas(buf, pagesize=A4)
    for i, line in enumerate(text_lines):
        c.drawString(72, 760 - 20 * i, line)
    c.showPage()
    c.save()
    return buf.getvalue()


@pytest.fixture
def admin_app(tmp_path, docs):
    from docjepa.apps.engine.app import ServerConfig, create_app

    url = f"sqlite:///{tmp_path / 'engine.db'}"
    db = make_engine(url, docs, pages=1)
    app = create_app(ServerConfig(db=url, media=str(tmp_path / "media"), max_upload_bytes=200_000))
    yield app, db, tmp_path / "media"
    db.dispose()


def test_uploads_are_sniffed_size_limited_and_stored_under_generated_names(admin_app):
    app, _, media = admin_app
    boss = client_for(app, "boss")
    pdf = _pdf(["Invoice 2024-117", "Total due: 1,250.00 EUR"])
    r = boss.post("/api/uploads", files={"file": ("../../etc/passwd.pdf", pdf, "application/pdf")})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["kind"] == "pdf" and out["pages"] == 1 and out["pages_added"] == 1 and out["name"] == "passwd.pdf"
    stored = sorted(p.name for p in media.iterdir())
    assert stored == [out["stored_as"]] and out["stored_as"].endswith(".pdf") and ".." not in out["stored_as"]
    assert not (media.parent / "etc").exists()
    page = boss.get(f"/api/pages/{boss.get('/api/me').json()['counts']['pages']}").json()
    assert "Invoice" in [w["text"] for w in page["words"]]  # the text layer became the page's words
    # A PDF named .png is still a PDF: the content decides.
    assert boss.post("/api/uploads", files={"file": ("scan.png", pdf, "image/png")}).json()["kind"] == "pdf"

    refused = {
        "empty": boss.post("/api/uploads", files={"file": ("empty.pdf", b"", "application/pdf")}),
        "polyglot": boss.post(
            "/api/uploads",
            files={"file": ("x.pdf", b"%PDF-1.4\n<html><script>alert(1)</script></html>", "application/pdf")},
        ),
        "html": boss.post(
            "/api/uploads", files={"file": ("x.pdf", b"<html><body>hi</body></html>", "application/pdf")}
        ),
        "truncated": boss.post("/api/uploads", files={"file": ("cut.pdf", pdf[: len(pdf) // 3], "application/pdf")}),
        "oversized": boss.post(
            "/api/uploads", files={"file": ("big.pdf", b"%PDF-1.4\n" + b"0" * 300_000, "application/pdf")}
        ),
    }
    codes = {k: r.status_code for k, r in refused.items()}
    assert codes == {"empty": 400, "polyglot": 422, "html": 415, "truncated": 422, "oversized": 413}, codes
    assert all(r.json()["detail"] and "Traceback" not in r.text for r in refused.values())
    assert "empty" in refused["empty"].json()["detail"] and "cannot be read" in refused["polyglot"].json()["detail"]
    assert len(list(media.iterdir())) == 2  # nothing refused was kept
    assert (
        client_for(app, "rev").post("/api/uploads", files={"file": ("a.pdf", pdf, "application/pdf")}).status_code
        == 403
    )


def test_rectangle_cover_is_exact_on_random_masks():
    from docjepa.apps.engine import masks
    from docjepa.data.record import rasterize

    rng = np.random.default_rng(0)
    for trial in range(20):
        h, w = rng.integers(5, 60, size=2)
        m = rng.random((h, w)) < rng.uniform(0.05, 0.9)
        if trial % 3 == 0:  # blobs, like brush strokes
            m = np.zeros((h, w), bool)
            for _ in range(3):
                y, x = rng.integers(0, h), rng.integers(0, w)
                m[max(0, y - 4) : y + 4, max(0, x - 6) : x + 6] = True
        boxes = masks.to_boxes(m)
        cover = np.zeros_like(m)
        for x0, y0, x1, y1 in boxes:
            assert not cover[y0:y1, x0:x1].any()  # disjoint
            cover[y0:y1, x0:x1] = True
        assert np.array_equal(cover, m)
        if m.any():  # and the polygons of page records rasterise back to the same pixels
            assert np.array_equal(rasterize(masks.to_polygons(m), (h, w)), m)
        assert np.array_equal(masks.decode(masks.encode(m)), m)
    assert masks.to_boxes(np.pad(np.ones((3, 4), bool), 2)) == [(2, 2, 6, 5)]  # a box stays one box


def _annotate_some(db, n: int):
    """n annotations by ann on distinct tasks: masks of 1-3 words, one not answerable."""
    from docjepa.apps.engine import masks, store

    ann = next(u for u in store.list_users(db) if u["name"] == "ann")
    made = []
    for i in range(n):
        task = store.claim_next(db, ann["id"])
        ids = list(range(i % 3, i % 3 + 1 + i % 3))
        answerable = i != 1
        mask = word_mask(task["page"], ids) if answerable else None
        # The model proposed this very mask; every other save keeps its candidate (accepted), the rest draw.
        proposed = masks.encode(word_mask(task["page"], ids))
        pid = store.record_proposal(db, task["id"], ann["id"], "propose", "m:1", [proposed], [0.9], 0)
        answer = store.Answer(task["question"], answerable, mask, 3.0 + i, i % 2, 0 if i % 2 == 0 else None, pid)
        made.append((store.create_annotation(db, task["id"], ann["id"], answer), mask))
    return made


def test_export_coco_jsonl_and_shards_split_by_document(tmp_path, docs):
    from pycocotools.coco import COCO

    from docjepa.apps.engine import masks
    from docjepa.apps.engine.export import export
    from docjepa.data.shards import DocumentDataset

    db = make_engine(f"sqlite:///{tmp_path / 'e.db'}", docs, pages=6)
    made = _annotate_some(db, 14)
    coco_info = export(db, "coco", tmp_path / "coco")
    assert coco_info["annotations"] == 13 and coco_info["unanswerable"] == 1
    coco = COCO(str(tmp_path / "coco" / "annotations.json"))
    for a, mask in made:
        if mask is None:
            continue
        ann = coco.loadAnns(a["id"])[0]
        assert np.array_equal(coco.annToMask(ann).astype(bool), mask)
        assert (tmp_path / "coco" / coco.loadImgs(ann["image_id"])[0]["file_name"]).is_file()

    jl = export(db, "jsonl", tmp_path / "jl")
    rows = [json.loads(line) for line in Path(jl["file"]).read_text().splitlines()]
    assert len(rows) == 14 and {r["answerable"] for r in rows} == {True, False}
    assert all(np.array_equal(masks.decode(r["mask"]), m) for r, (_, m) in zip(rows, made) if m is not None)

    sh = export(db, "shards", tmp_path / "sh", val_fraction=0.3)
    train, val = DocumentDataset(tmp_path / "sh" / "train"), DocumentDataset(tmp_path / "sh" / "val")
    assert len(train) >= 1 and len(val) >= 1
    train_docs = {train[i].doc_id for i in range(len(train))}
    val_docs = {val[i].doc_id for i in range(len(val))}
    assert not train_docs & val_docs and val_docs == set(sh["validation_documents"])
    by_q = {(a["page_id"], a["question"]): m for a, m in made if m is not None}
    from docjepa.apps.engine import store

    checked = 0
    for ds in (train, val):
        for i in range(len(ds)):
            page = ds[i]
            for qi, q in enumerate(page.questions):
                pid = next(
                    p
                    for p in range(1, 7)
                    if store.page_info(db, p)["doc_id"] == page.doc_id and store.page_info(db, p)["page"] == page.page
                )
                assert np.array_equal(page.answer_mask(qi), by_q[(pid, q.text)])  # the regions rasterise to the mask
                checked += 1
    assert checked == 13
    with pytest.raises(FileExistsError):
        export(db, "shards", tmp_path / "sh")  # never writes over an earlier export
    db.dispose()


def test_stats_and_command_line(tmp_path, docs, capsys, monkeypatch):
    from docjepa.apps.cli import main
    from docjepa.apps.engine import stats

    url = f"sqlite:///{tmp_path / 'e.db'}"
    main(["engine", "init", "--db", url, "--data", str(docs / "d"), "--limit", "3", "--no-progress"])
    out = json.loads(capsys.readouterr().out)
    assert out["pages_added"] == 3 and out["tasks_added"] > 3 and out["schema"] == "0005"
    main(["engine", "init", "--db", url, "--data", str(docs / "d"), "--limit", "3", "--no-progress"])
    assert json.loads(capsys.readouterr().out)["pages_already_there"] == 3
    monkeypatch.setenv("PW", PASSWORD)
    main(["engine", "user", "add", "ann", "--role", "annotator", "--db", url, "--password-env", "PW"])
    monkeypatch.setenv("PW", "short")
    with pytest.raises(SystemExit) as exc:
        main(["engine", "user", "add", "bob", "--role", "annotator", "--db", url, "--password-env", "PW"])
    assert exc.value.code == 2 and "at least 8 characters" in capsys.readouterr().err
    from docjepa.apps.engine.db import Database

    db = Database(url)
    made = _annotate_some(db, 4)
    s = stats.compute(db)
    person = s["by_person"]["ann"]
    assert person["annotations"] == 4 and person["accepted_as_is_rate"] == 0.5 and person["drawn_rate"] == 0.25
    assert person["refined_rate"] == 0 and person["edited_rate"] == 0  # the fourth is not answerable
    assert person["seconds_per_mask_median"] == pytest.approx(np.median([3, 4, 5, 6]))
    assert person["edits_per_mask_mean"] == pytest.approx(0.5)
    assert sum(sum(d.values()) for d in s["per_day"].values()) == 4 and s["reviews"] == {"pending": 4}
    main(["engine", "stats", "--db", url, "--out", str(tmp_path / "st")])
    assert (tmp_path / "st" / "stats.png").read_bytes().startswith(b"\x89PNG")
    main(["engine", "export", "--db", url, "--format", "coco", "--out", str(tmp_path / "c")])
    coco = json.loads((tmp_path / "c" / "annotations.json").read_text())
    assert len(coco["annotations"]) == 3 and len(coco["unanswerable"]) == 1
    capsys.readouterr()
    main(["engine", "check", "--db", url])
    assert json.loads(capsys.readouterr().out)["problems"] == []
    with db.writer.begin() as conn:  # break an invariant: a done task without its annotation
        conn.exec_driver_sql("UPDATE tasks SET status = 'done' WHERE id = (SELECT MAX(id) FROM tasks)")
    with pytest.raises(SystemExit) as exc:
        main(["engine", "check", "--db", url])
    assert exc.value.code == 1 and "without an annotation" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main(["engine", "serve", "--db", f"sqlite:///{tmp_path / 'none.db'}", "--no-model"])
    assert exc.value.code == 2 and "engine init" in capsys.readouterr().err
    assert len(made) == 4
    db.dispose()
