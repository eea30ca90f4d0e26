"""The annotation service's HTTP API over SQLite and PostgreSQL: sign-in and roles, leases, proposals, saves
with optimistic concurrency, reviews, the audit log, bad requests."""

import numpy as np
import pytest

from .conftest import PASSWORD, client_for, make_engine, mask_png, word_mask


@pytest.fixture
def engine(db_url, docs, tiny_proposer):
    from docjepa.apps.engine.app import ServerConfig, create_app

    db = make_engine(db_url, docs)
    app = create_app(ServerConfig(db=db_url, media=str(docs / "media-unused")), proposer=tiny_proposer)
    yield app, db
    db.dispose()
    app.state.db.dispose()


def test_schema_comes_from_the_migrations_and_init_is_repeatable(db_url):
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from docjepa.apps.engine.db import Database
    from docjepa.apps.engine.tables import Base
    from docjepa.core.errors import UsageError

    db = Database(db_url)
    with pytest.raises(UsageError, match="engine init"):
        db.require_schema()
    # A database made by the first version, with data in it, is upgraded in place by a later init.
    assert db.migrate("0001") == "0001"
    with pytest.raises(UsageError, match="schema 0001"):
        db.require_schema()
    from docjepa.apps.engine import store

    with db.writer.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO users (name, role, password_hash, active, created_at) VALUES ('old', 'admin', 'x', true, 0)"
        )
        conn.exec_driver_sql(
            "INSERT INTO pages (doc_id, page_no, width, height, image, words, source, layout, created_at) "
            "VALUES ('d', 0, 10, 10, 'png', '[]', '', '', 0)"
        )
        conn.exec_driver_sql(
            "INSERT INTO tasks (page_id, question, qtype, status, claims, created_at) "
            "VALUES (1, 'q?', '', 'done', 1, 0)"
        )
        conn.exec_driver_sql(
            "INSERT INTO annotations (task_id, page_id, question, answerable, word_ids, user_id, seconds, edits, "
            "review, review_reason, version, created_at, updated_at) "
            "VALUES (1, 1, 'q?', false, '[]', 1, 1.0, 0, 'pending', '', 1, 0, 0)"
        )
    head = db.migrate()
    assert head == "0005"
    with db.reader.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []  # models = migrations
    old = store.get_annotation(db, 1)
    assert old["question"] == "q?" and old["source"] == "human"  # kept, with the new column's default
    assert old["outcome"] == "not-answerable" and old["edited_by"] == 1  # what the old row says of itself
    store.add_user(db, "ann", "annotator", PASSWORD)
    assert db.migrate() == head  # running init again changes nothing
    assert [u["name"] for u in store.list_users(db)] == ["old", "ann"]
    with db.writer.begin() as conn:
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = '0000'")
    with pytest.raises(UsageError, match="schema 0000"):
        db.require_schema()
    db.dispose()


def test_every_endpoint_needs_a_signed_in_user_and_roles_are_enforced(engine):
    from fastapi.testclient import TestClient

    app, _ = engine
    anon = TestClient(app)
    paths = app.openapi()["paths"]  # every /api route (the page and its static files are outside /api)
    routes = [(m.upper(), path) for path, ops in paths.items() if path.startswith("/api/") for m in ops]
    open_routes = {
        ("POST", "/api/login"),
        ("GET", "/api/docs"),
        ("GET", "/api/openapi.json"),
        ("HEAD", "/api/docs"),
        ("HEAD", "/api/openapi.json"),
    }
    checked = 0
    for method, path in routes:
        if (method, path) in open_routes or path.startswith("/api/docs"):
            continue
        r = anon.request(
            method, path.replace("{task_id}", "1").replace("{annotation_id}", "1").replace("{page_id}", "1")
        )
        assert r.status_code == 401, (method, path, r.status_code)
        checked += 1
    assert checked >= 20
    assert anon.get("/").status_code == 200 and anon.get("/static/app.js").status_code == 200
    assert anon.post("/api/login", json={"name": "ann", "password": "wrong password"}).status_code == 403
    assert anon.post("/api/login", json={"name": "nobody", "password": PASSWORD}).status_code == 403

    ann = client_for(app, "ann")
    cookie = ann.cookies.jar and next(iter(ann.cookies.jar))
    assert cookie.name == "docjepa_session"
    login = anon.post("/api/login", json={"name": "ann", "password": PASSWORD})
    flags = login.headers["set-cookie"].lower()
    assert "httponly" in flags and "samesite=strict" in flags
    for method, path in [
        ("GET", "/api/review/next"),
        ("GET", "/api/stats"),
        ("GET", "/api/users"),
        ("POST", "/api/uploads"),
    ]:
        assert ann.request(method, path).status_code == 403, path
    rev = client_for(app, "rev")
    assert rev.get("/api/stats").status_code == 200
    assert rev.get("/api/users").status_code == 403
    assert rev.post("/api/users", json={"name": "x", "role": "admin", "password": PASSWORD}).status_code == 403
    boss = client_for(app, "boss")
    assert boss.post("/api/users", json={"name": "eve", "role": "annotator", "password": PASSWORD}).status_code == 200
    # A bearer token works instead of the cookie; signing out ends it.
    token = login.json()["token"]
    bearer = TestClient(app, headers={"Authorization": f"Bearer {token}"})
    assert bearer.get("/api/me").json()["name"] == "ann"
    assert bearer.post("/api/logout").status_code == 200
    assert bearer.get("/api/me").status_code == 401


def test_annotate_propose_save_update_conflict_review_and_audit(engine):
    app, db = engine
    ann, bob, rev = client_for(app, "ann"), client_for(app, "bob"), client_for(app, "rev")
    task = ann.post("/api/tasks/next").json()
    assert task["question"] and task["page"]["words"]
    assert bob.post("/api/tasks/next").json()["id"] != task["id"]  # leased: bob gets another
    assert ann.post("/api/tasks/next").json()["id"] == task["id"]  # ann gets her own back
    assert ann.get(f"/api/pages/{task['page_id']}/image").content.startswith(b"\x89PNG")

    prop = ann.post(f"/api/tasks/{task['id']}/propose", json={"question": task["question"]}).json()
    assert len(prop["candidates"]) == 3 and 0 <= prop["best"] < 3 and prop["model_version"].count(":") == 1
    assert all(c["png"].startswith("data:image/png;base64,") for c in prop["candidates"])
    missed = ann.post(f"/api/tasks/{task['id']}/missed", json={"question": "Where is the page number?"})
    assert (
        missed.status_code == 200
        and bob.post(f"/api/tasks/{task['id']}/missed", json={"question": "x"}).status_code == 409
    )
    changed = ann.post(f"/api/tasks/{task['id']}/propose", json={"question": "something else"})
    assert changed.status_code == 422
    assert bob.post(f"/api/tasks/{task['id']}/propose", json={"question": task["question"]}).status_code == 409

    page = task["page"]
    mask = word_mask(page, [0, 1])
    body = {
        "question": task["question"],
        "mask_png": mask_png(mask),
        "seconds": 12.5,
        "edits": 2,
        "candidate": None,
        "proposal_id": prop["proposal_id"],
    }
    assert bob.post(f"/api/tasks/{task['id']}/annotation", json=body).status_code == 409  # not bob's lease
    saved = ann.post(f"/api/tasks/{task['id']}/annotation", json=body)
    assert saved.status_code == 200, saved.text
    a = saved.json()
    assert a["version"] == 1 and a["word_ids"] == [0, 1] and a["edits"] == 2 and a["review"] == "pending"
    assert (a["model_version"], a["outcome"]) == (prop["model_version"], "drawn")  # from the proposal's record
    from docjepa.apps.engine import masks

    assert np.array_equal(masks.decode(a["mask"]), mask)
    assert ann.post(f"/api/tasks/{task['id']}/annotation", json=body).status_code == 409  # the task is done

    # Optimistic concurrency: the first save from version 1 wins; the second, from the same version, gets 409.
    upd = body | {"mask_png": mask_png(word_mask(page, [2])), "version": 1}
    first = ann.put(f"/api/annotations/{a['id']}", json=upd)
    assert first.status_code == 200 and first.json()["version"] == 2 and first.json()["word_ids"] == [2]
    stale = ann.put(f"/api/annotations/{a['id']}", json=upd | {"mask_png": mask_png(word_mask(page, [3]))})
    assert stale.status_code == 409
    assert stale.json()["current"]["version"] == 2 and stale.json()["current"]["word_ids"] == [2]
    assert bob.put(f"/api/annotations/{a['id']}", json=upd | {"version": 2}).status_code == 403  # not his
    assert bob.get(f"/api/annotations/{a['id']}").status_code == 403
    assert ann.get(f"/api/annotations/{a['id']}/mask.png").content.startswith(b"\x89PNG")

    # Review: reasons are required for reject and fix; a fix replaces the mask and waits for another reviewer.
    nxt = rev.get("/api/review/next").json()
    assert nxt["id"] == a["id"]
    assert rev.post(f"/api/annotations/{a['id']}/review", json={"version": 2, "decision": "reject"}).status_code == 422
    fix = {"question": task["question"], "mask_png": mask_png(word_mask(page, [4, 5]))}
    r = rev.post(
        f"/api/annotations/{a['id']}/review", json={"version": 2, "decision": "fix", "reason": "two words", "fix": fix}
    )
    assert r.status_code == 200, r.text
    assert r.json()["review"] == "pending" and r.json()["word_ids"] == [4, 5] and r.json()["version"] == 3
    own_fix = rev.post(f"/api/annotations/{a['id']}/review", json={"version": 3, "decision": "approve"})
    assert own_fix.status_code == 403 and "last changed it" in own_fix.json()["detail"]  # four eyes
    boss = client_for(app, "boss")
    stale = boss.post(f"/api/annotations/{a['id']}/review", json={"version": 2, "decision": "approve"})
    assert stale.status_code == 409
    approved = boss.post(f"/api/annotations/{a['id']}/review", json={"version": 3, "decision": "approve"})
    assert approved.json()["review"] == "approved" and approved.json()["reviewer_id"] != r.json()["edited_by"]

    log = rev.get(f"/api/annotations/{a['id']}/audit").json()
    assert [e["action"] for e in log] == ["create", "update", "conflict", "review", "conflict", "review"]
    assert log[1]["before"]["word_ids"] == [0, 1] and log[1]["after"]["word_ids"] == [2]
    assert log[2]["after"]["word_ids"] == [3]  # the refused save is kept, not lost
    assert db.integrity_problems() == []

    # Not answerable: no mask needed; an empty mask that claims an answer is refused.
    t2 = ann.post("/api/tasks/next").json()
    empty = {
        "question": t2["question"],
        "mask_png": mask_png(np.zeros((t2["page"]["height"], t2["page"]["width"]), bool)),
    }
    assert ann.post(f"/api/tasks/{t2['id']}/annotation", json=empty).status_code == 422
    na = ann.post(f"/api/tasks/{t2['id']}/annotation", json={"question": t2["question"], "answerable": False})
    assert na.status_code == 200 and na.json()["mask"] is None
    stats = rev.get("/api/stats").json()
    assert stats["annotations"] == 2 and stats["by_person"]["ann"]["annotations"] == 2
    assert rev.get("/api/stats/plot.png").content.startswith(b"\x89PNG")


def test_an_expired_lease_returns_the_task(engine):
    app, _ = engine
    app.state.cfg.lease_seconds = 0.3
    ann, bob = client_for(app, "ann"), client_for(app, "bob")
    t = ann.post("/api/tasks/next").json()
    import time

    time.sleep(0.5)
    assert bob.post("/api/tasks/next").json()["id"] == t["id"]  # ann's lease ran out
    body = {"question": t["question"], "answerable": False}
    assert ann.post(f"/api/tasks/{t['id']}/annotation", json=body).status_code == 409
    assert ann.post(f"/api/tasks/{t['id']}/renew").status_code == 409


def test_bad_requests_get_a_4xx_with_a_message(engine):
    app, _ = engine
    ann = client_for(app, "ann")
    t = ann.post("/api/tasks/next").json()
    bad = [
        ann.post(
            f"/api/tasks/{t['id']}/annotation", content=b"{not json", headers={"content-type": "application/json"}
        ),
        ann.post(f"/api/tasks/{t['id']}/annotation", json={"answerable": True}),
        ann.post("/api/tasks/abc/annotation", json={"question": "q"}),
        ann.get("/api/pages/999999"),
        ann.get("/api/annotations/999999"),
        ann.post(f"/api/tasks/{t['id']}/annotation", json={"question": t["question"], "mask_png": "%%%"}),
        ann.post(
            f"/api/tasks/{t['id']}/annotation",
            json={"question": t["question"], "mask_png": mask_png(np.ones((5, 5), bool))},
        ),
        ann.post(
            f"/api/tasks/{t['id']}/annotation", json={"question": t["question"], "answerable": False, "seconds": -1}
        ),
        ann.post(
            f"/api/tasks/{t['id']}/annotation", json={"question": t["question"], "answerable": False, "edits": "many"}
        ),
        ann.post(
            f"/api/tasks/{t['id']}/annotation",
            content=b"x" * (17 * 2**20),
            headers={"content-type": "application/json"},
        ),
    ]
    for r in bad:
        assert 400 <= r.status_code < 500, (r.status_code, r.text[:200])
        assert r.json()["detail"] and "Traceback" not in r.text
    assert [r.status_code for r in bad] == [422, 422, 422, 404, 404, 422, 422, 422, 422, 413]
    assert "is 5×5, the page" in bad[6].json()["detail"]


def test_refine_answers_again_from_clicks_a_box_and_the_current_mask(engine, tiny_proposer):
    app, _ = engine
    ann, bob = client_for(app, "ann"), client_for(app, "bob")
    task = ann.post("/api/tasks/next").json()
    page, q = task["page"], task["question"]
    url = f"/api/tasks/{task['id']}/refine"
    prop = ann.post(f"/api/tasks/{task['id']}/propose", json={"question": q}).json()
    x0, y0, x1, y1 = page["words"][0]["box"]
    current = mask_png(word_mask(page, [1]))
    calls = []
    refine = tiny_proposer.model.refine
    tiny_proposer.model.refine = lambda *a, **k: calls.append(k) or refine(*a, **k)
    try:
        body = {
            "question": q,
            "points": [[(x0 + x1) / 2, (y0 + y1) / 2], [5, 5]],
            "labels": [1, 0],
            "mask_png": current,
        }
        again = ann.post(url, json=body)
        assert again.status_code == 200, again.text
        out = again.json()
        assert len(out["candidates"]) == 3 and out["model_version"] == prop["model_version"]
        assert out["encode_seconds"] == 0.0  # the page's encoding came from the cache
        sent = calls[-1]
        assert sent["labels"] == [1, 0] and sent["points"][1] == [5.0, 5.0] and sent["box"] is None
        assert np.array_equal(sent["mask"], word_mask(page, [1]))  # the current answer is the mask prompt
        boxed = ann.post(url, json={"question": q, "box": [x0, y0, x1, y1]})
        assert boxed.status_code == 200 and calls[-1]["box"] == [x0, y0, x1, y1] and calls[-1]["mask"] is None
    finally:
        tiny_proposer.model.refine = refine
    assert ann.post(url, json={"question": q, "points": [[1, 2]], "labels": []}).status_code == 422
    assert ann.post(url, json={"question": q}).status_code == 422  # nothing to refine with
    assert ann.post(url, json={"question": q, "points": [[1, 2]], "labels": [2]}).status_code == 422
    assert bob.post(url, json={"question": q, "points": [[1, 2]], "labels": [1]}).status_code == 409  # not his


def test_refine_on_a_server_without_a_model(db_url, docs):
    from docjepa.apps.engine.app import ServerConfig, create_app

    db = make_engine(db_url, docs)
    app = create_app(ServerConfig(db=db_url, media=str(docs / "media-unused")), proposer=None)
    ann = client_for(app, "ann")
    task = ann.post("/api/tasks/next").json()
    r = ann.post(
        f"/api/tasks/{task['id']}/refine", json={"question": task["question"], "points": [[1, 2]], "labels": [1]}
    )
    assert r.status_code == 503 and "without --checkpoint" in r.json()["detail"]
    db.dispose()
    app.state.db.dispose()


def test_refine_an_annotation_already_saved_and_pass_over_one_in_review(engine):
    """The Model tool on an earlier annotation (its author or a reviewer; nothing saved), and Review's Next: the
    annotation passed over is not shown again while another waits."""
    app, _ = engine
    ann, bob, rev = client_for(app, "ann"), client_for(app, "bob"), client_for(app, "rev")
    ids = []
    for _ in range(2):
        task = ann.post("/api/tasks/next").json()
        body = {"question": task["question"], "mask_png": mask_png(word_mask(task["page"], [0]))}
        ids.append(ann.post(f"/api/tasks/{task['id']}/annotation", json=body).json()["id"])
    x0, y0, x1, y1 = task["page"]["words"][1]["box"]
    click = {"question": task["question"], "points": [[(x0 + x1) / 2, (y0 + y1) / 2]], "labels": [1]}
    again = ann.post(f"/api/annotations/{ids[1]}/refine", json=click)
    assert again.status_code == 200 and len(again.json()["candidates"]) == 3
    assert all("rle" not in c for c in again.json()["candidates"])
    assert rev.post(f"/api/annotations/{ids[1]}/refine", json=click).status_code == 200
    assert bob.post(f"/api/annotations/{ids[1]}/refine", json=click).status_code == 403  # not his
    moved = ann.post(f"/api/annotations/{ids[1]}/refine", json=click | {"question": "Something else?"})
    assert moved.status_code == 422
    assert ann.get(f"/api/annotations/{ids[1]}").json()["version"] == 1  # nothing saved
    first = rev.get("/api/review/next").json()["id"]
    second = rev.get(f"/api/review/next?after={first}").json()["id"]
    assert {first, second} == set(ids) and rev.get(f"/api/review/next?after={second}").json()["id"] == first
    assert rev.get("/api/review/next?after=0").status_code == 422
