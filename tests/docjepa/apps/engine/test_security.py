"""What a security review and a new team found: sign-in throttling, cross-site request forgery, self-review, numbers
beyond the columns' range, streamed oversized bodies, the API description; and the data that reached exports
wrong (not-answerable saves, edits of one's own annotation, skips, leases held by reviewers and after sign-out,
rejection reasons, candidates not snapped to words)."""

import json
import threading

import numpy as np
import pytest

from .conftest import PASSWORD, client_for, make_engine, mask_png, word_mask


@pytest.fixture
def engine(tmp_path, docs):
    from docjepa.apps.engine.app import ServerConfig, create_app

    url = f"sqlite:///{tmp_path / 'e.db'}"
    db = make_engine(url, docs, pages=6)
    yield (lambda **cfg: create_app(ServerConfig(db=url, **cfg), proposer=None)), db
    db.dispose()


class Clock:
    """The throttle's clock, moved by hand: waits are tested without sleeping."""

    def __init__(self, monkeypatch, t=1_000_000.0):
        from docjepa.apps.engine.store import throttle

        self.t = t
        monkeypatch.setattr(throttle, "now", lambda: self.t)


def _sign_ins(db):
    from docjepa.apps.engine import store

    return [e for e in store.audit_log(db) if e["entity"] == "sign-in"]


def test_failed_sign_ins_wait_longer_and_longer_per_account_and_per_address(engine, monkeypatch):
    from fastapi.testclient import TestClient

    make_app, db = engine
    clock = Clock(monkeypatch)
    app = make_app(sign_in_free_attempts=3, sign_in_free_per_address=8, sign_in_base_delay=10.0, sign_in_max_delay=60.0)
    anon = TestClient(app)

    def attempt(name, password="wrong password"):
        return anon.post("/api/login", json={"name": name, "password": password})

    assert [attempt("ann").status_code for _ in range(4)] == [403, 403, 403, 403]  # 3 free, then a 4th counted
    refused = attempt("ann", PASSWORD)  # now even the right password waits: the password is not looked at
    assert refused.status_code == 429 and refused.headers["retry-after"] == "10"
    clock.t += 9
    assert attempt("ann", PASSWORD).status_code == 429
    clock.t += 1.5
    assert attempt("ann").status_code == 403  # heard again, failed: the next wait doubles
    clock.t += 11
    assert attempt("ann", PASSWORD).status_code == 429
    clock.t += 10
    ok = attempt("ann", PASSWORD)
    assert ok.status_code == 200 and ok.json()["user"]["name"] == "ann"
    assert attempt("ann").status_code == 403  # a correct password starts the account again from zero
    # The address is counted too: guessing many accounts from it is throttled the same way (8 free there).
    clock.t += 3600 + 1  # everything forgotten
    codes = [attempt(f"user{i}").status_code for i in range(10)]
    assert codes == [403] * 9 + [429]
    log = _sign_ins(db)
    assert sum(e["action"] == "failed" for e in log) == 15 and sum(e["action"] == "refused" for e in log) == 4
    assert all(e["after"]["keys"][-1] == "addr:testclient" for e in log)


def test_parallel_guesses_cannot_pass_the_count_together(engine, monkeypatch):
    from fastapi.testclient import TestClient

    make_app, db = engine
    Clock(monkeypatch)
    app = make_app(sign_in_free_attempts=3, sign_in_base_delay=60.0)
    codes = []

    def guess():
        codes.append(TestClient(app).post("/api/login", json={"name": "ann", "password": "nope nope"}).status_code)

    threads = [threading.Thread(target=guess) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(codes) == [403] * 4 + [429] * 8  # 3 free + the one that set the wait; the rest refused unheard
    assert [e["action"] for e in _sign_ins(db)].count("failed") == 4


def test_correct_sign_ins_at_the_same_moment_are_never_refused(db_url, docs, monkeypatch):
    """A shift starting behind one NAT: 50 people sign in at the same moment from one address, through two servers
    sharing the database, some of them twice (two tabs); every one gets in and none is audited as refused. Wrong
    passwords among them are still counted."""
    import threading

    from fastapi.testclient import TestClient

    from docjepa.apps.engine import store
    from docjepa.apps.engine.app import ServerConfig, create_app

    names = [f"p{i:02d}" for i in range(50)]
    db = make_engine(db_url, docs, pages=1, users=())
    monkeypatch.setattr(store.accounts, "_hasher", _quick_hasher)  # 50 argon2 hashes at its full cost take long
    for name in names:
        store.add_user(db, name, "annotator", PASSWORD)
    apps = [create_app(ServerConfig(db=db_url), proposer=None) for _ in range(2)]
    people = names + names[:10] + ["p00"] * 2  # ten in a second tab, one in three
    start, codes = threading.Barrier(len(people) + 1), {}

    def sign_in(i: int, name: str) -> None:
        client = TestClient(apps[i % 2])
        start.wait()
        codes[i] = client.post("/api/login", json={"name": name, "password": PASSWORD}).status_code

    threads = [threading.Thread(target=sign_in, args=(i, n)) for i, n in enumerate(people)]
    for t in threads:
        t.start()
    start.wait()
    for t in threads:
        t.join()
    assert sorted(codes.values()) == [200] * len(people)
    assert not [e for e in _sign_ins(db) if e["action"] == "refused"]
    wrong = TestClient(apps[0]).post("/api/login", json={"name": "p01", "password": "not the password"})
    assert wrong.status_code == 403
    assert [e["after"]["failures"] for e in _sign_ins(db)] == [{"user:p01": 1, "addr:testclient": 1}]
    db.dispose()


def _quick_hasher():
    from argon2 import PasswordHasher

    return PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)


def test_an_accounts_checks_in_flight_are_bounded_and_a_dead_ones_slot_comes_back(engine, monkeypatch):
    """An account has as many password checks in flight as it has free failures left; one more waits for a slot
    (refused, audited as busy, when none frees in time); a slot held by a process that died frees after a minute."""
    from docjepa.apps.engine.store import throttle

    _, db = engine
    clock = Clock(monkeypatch)
    rules = throttle.Throttle(free=3, queue=0.05)
    charged = throttle.keys("ann", "10.0.0.1")
    for _ in range(3):
        throttle.reserve(db, charged, rules)  # three checks in flight, none settled (their process killed)
    with pytest.raises(throttle.Throttled):
        throttle.reserve(db, charged, rules)
    assert [e["after"].get("busy") for e in _sign_ins(db)] == [True]
    throttle.settle(db, charged, rules, "failed")  # one comes back failed: 2 free failures left, 2 in flight
    with pytest.raises(throttle.Throttled):
        throttle.reserve(db, charged, rules)
    clock.t += throttle.STALE + 1
    throttle.reserve(db, charged, rules)  # the dead checks' slots are back
    throttle.settle(db, charged, rules, "ok")
    other = throttle.keys("bob", "10.0.0.1")
    for _ in range(3):  # another account from the same address is not held up by ann's
        throttle.reserve(db, other, rules)


def _csrf_app(engine):
    make_app, _ = engine
    return make_app()


def test_state_changes_need_the_session_token_and_the_served_origin(engine):
    from fastapi.testclient import TestClient

    app = _csrf_app(engine)
    ann = client_for(app, "ann")  # a signed-in page: cookie + X-CSRF-Token
    task = ann.post("/api/tasks/next").json()
    forged = TestClient(app)  # the same cookie, no token: what a form on another page sends
    forged.cookies = ann.cookies
    for path in (f"/api/tasks/{task['id']}/release", "/api/logout", "/api/tasks/next"):
        r = forged.post(path)
        assert r.status_code == 403 and "X-CSRF-Token" in r.json()["detail"], path
    wrong = forged.post(f"/api/tasks/{task['id']}/release", headers={"X-CSRF-Token": "0" * 64})
    assert wrong.status_code == 403
    # A page of the same site on another port, even holding the token, is refused by its origin.
    other = ann.post(f"/api/tasks/{task['id']}/release", headers={"Origin": "http://testserver:8001"})
    assert other.status_code == 403 and "cross-origin" in other.json()["detail"]
    referer = ann.post("/api/logout", headers={"Referer": "http://127.0.0.1:9999/attack.html"})
    assert referer.status_code == 403
    assert ann.get("/api/me").status_code == 200  # reads need no token; the session is still there
    same = ann.post(f"/api/tasks/{task['id']}/renew", headers={"Origin": "http://testserver"})
    assert same.status_code == 200
    assert ann.get("/api/me").json()["csrf_token"] == ann.headers["X-CSRF-Token"]  # a reloaded page gets it again
    # Scripts with a bearer token (never sent by a browser on its own) need no token.
    token = TestClient(app).post("/api/login", json={"name": "bob", "password": PASSWORD}).json()["token"]
    bearer = TestClient(app, headers={"Authorization": f"Bearer {token}"})
    assert bearer.post("/api/tasks/next").status_code == 200
    proxied = engine[0](allowed_origins=["https://annotate.example.org"])
    rev = client_for(proxied, "rev")
    assert rev.post("/api/tasks/next", headers={"Origin": "https://annotate.example.org"}).status_code == 200


def test_nobody_reviews_their_own_annotation(engine):
    app = _csrf_app(engine)
    rev = client_for(app, "rev")
    task = rev.post("/api/tasks/next").json()
    a = rev.post(f"/api/tasks/{task['id']}/annotation", json={"question": task["question"], "answerable": False})
    own = rev.post(f"/api/annotations/{a.json()['id']}/review", json={"version": 1, "decision": "approve"})
    assert own.status_code == 403 and "someone other than its author" in own.json()["detail"]
    boss = client_for(app, "boss")
    assert boss.post(f"/api/annotations/{a.json()['id']}/review", json={"version": 1, "decision": "approve"}).is_success


def test_numbers_beyond_the_columns_are_422_and_streamed_bodies_413(engine):
    app = _csrf_app(engine)
    ann = client_for(app, "ann")
    big = 2**63
    for path in (f"/api/pages/{big}/image", f"/api/tasks/{big}", f"/api/annotations/{big}", f"/api/pages/{2**31}"):
        assert ann.get(path).status_code == 422, path
    task = ann.post("/api/tasks/next").json()
    m = word_mask(task["page"], [0])
    for extra in ({"edits": 1e30}, {"edits": -1}, {"candidate": 2**40}, {"seconds": 1e300}):
        body = {"question": task["question"], "mask_png": mask_png(m), **extra}
        r = ann.post(f"/api/tasks/{task['id']}/annotation", json=body)
        assert r.status_code == 422, (extra, r.text)

    def stream():  # 17 MiB in chunks, no Content-Length
        for _ in range(17):
            yield b"x" * 2**20

    r = ann.post(f"/api/tasks/{task['id']}/annotation", content=stream(), headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and "larger than" in r.json()["detail"]
    assert ann.post("/api/tasks/next").status_code == 200  # and the service goes on


def test_the_api_description_is_off_unless_asked_for_and_then_behind_sign_in(engine):
    from fastapi.testclient import TestClient

    app = _csrf_app(engine)
    for path in ("/api/docs", "/redoc", "/api/openapi.json", "/docs"):
        assert TestClient(app).get(path).status_code == 404, path
    with_docs = engine[0](api_docs=True)
    assert TestClient(with_docs).get("/api/openapi.json").status_code == 401
    schema = client_for(with_docs, "ann").get("/api/openapi.json").json()
    assert "/api/tasks/next" in schema["paths"]


def test_saves_record_what_was_done(engine):
    from docjepa.apps.engine import store

    app = _csrf_app(engine)
    _, db = engine
    ann, rev = client_for(app, "ann"), client_for(app, "rev")
    # "Not answerable" with a candidate still selected is not an accepted candidate; a forged provenance is ignored.
    task = ann.post("/api/tasks/next").json()
    body = {"question": task["question"], "answerable": False, "model_version": "m:1", "seconds": 3}
    na = ann.post(f"/api/tasks/{task['id']}/annotation", json=body).json()
    assert na["answerable"] is False and na["candidate"] is None and na["model_version"] is None
    assert na["outcome"] == "not-answerable"
    # A candidate needs the proposal it came from: a client cannot claim one.
    task = ann.post("/api/tasks/next").json()
    m = word_mask(task["page"], [0, 1])
    claimed = {"question": task["question"], "mask_png": mask_png(m), "candidate": 1, "model_version": "m:2"}
    refused = ann.post(f"/api/tasks/{task['id']}/annotation", json=claimed)
    assert refused.status_code == 422 and "proposal" in refused.json()["detail"]
    # Drawn, then edited by its author: time and edits added, question fixed.
    body = {"question": task["question"], "mask_png": mask_png(m), "seconds": 4.0, "model_version": "m:2"}
    a = ann.post(f"/api/tasks/{task['id']}/annotation", json=body).json()
    assert (a["model_version"], a["outcome"], a["edited_by"]) == (None, "drawn", a["user_id"])
    same = {"question": task["question"], "mask_png": mask_png(m), "seconds": 2.0, "edits": 0, "version": 1}
    kept = ann.put(f"/api/annotations/{a['id']}", json=same).json()
    assert (kept["outcome"], kept["seconds"], kept["edits"]) == ("drawn", 6.0, 0)
    changed = same | {"mask_png": mask_png(word_mask(task["page"], [0])), "edits": 1, "version": 2}
    after = ann.put(f"/api/annotations/{a['id']}", json=changed).json()
    assert (after["outcome"], after["seconds"], after["edits"]) == ("drawn", 8.0, 1)
    moved = ann.put(f"/api/annotations/{a['id']}", json=changed | {"question": "Something else?", "version": 3})
    assert moved.status_code == 422 and "cannot be changed" in moved.json()["detail"]
    fix = changed | {"question": "Something else?"}
    r = rev.post(
        f"/api/annotations/{a['id']}/review", json={"version": 3, "decision": "fix", "reason": "r", "fix": fix}
    )
    assert r.status_code == 422
    assert store.get_annotation(db, a["id"])["question"] == task["question"]
    # Rejected work comes back to its author with the reason, and only it when asked for.
    rejected = rev.post(
        f"/api/annotations/{na['id']}/review", json={"version": 1, "decision": "reject", "reason": "look again"}
    )
    assert rejected.status_code == 200
    mine = ann.get("/api/annotations/mine?review=rejected").json()
    assert [(x["id"], x["review_reason"]) for x in mine] == [(na["id"], "look again")]
    assert len(ann.get("/api/annotations/mine").json()) == 2
    assert ann.get("/api/annotations/mine?review=lost").status_code == 422


def test_four_eyes_on_every_change(engine):
    """A reviewer who changes someone's annotation (an edit, or a fix) made its content: another reviewer or an
    admin reviews it, and the change needs a reason. Before, a reviewer could PUT a new mask on another person's
    annotation and then approve it."""
    app = _csrf_app(engine)
    ann, rev, boss = client_for(app, "ann"), client_for(app, "rev"), client_for(app, "boss")
    task = ann.post("/api/tasks/next").json()
    m = word_mask(task["page"], [0, 1])
    a = ann.post(f"/api/tasks/{task['id']}/annotation", json={"question": task["question"], "mask_png": mask_png(m)})
    a = a.json()
    edit = {"question": task["question"], "mask_png": mask_png(word_mask(task["page"], [2])), "version": 1}
    silent = rev.put(f"/api/annotations/{a['id']}", json=edit)
    assert silent.status_code == 422 and "reason" in silent.json()["detail"]
    changed = rev.put(f"/api/annotations/{a['id']}", json=edit | {"reason": "the total is the third word"}).json()
    assert changed["edited_by"] == rev.get("/api/me").json()["id"] != a["user_id"]
    assert changed["review"] == "pending" and changed["review_reason"] == "the total is the third word"
    approve = rev.post(f"/api/annotations/{a['id']}/review", json={"version": 2, "decision": "approve"})
    assert approve.status_code == 403 and "last changed it" in approve.json()["detail"]
    assert rev.get("/api/review/next").status_code == 404  # what one changed is not offered to one for review
    assert boss.get("/api/review/next").json()["id"] == a["id"]
    # A fix is a change too: it waits for someone else.
    fix = {"question": task["question"], "mask_png": mask_png(word_mask(task["page"], [3]))}
    fixed = boss.post(
        f"/api/annotations/{a['id']}/review", json={"version": 2, "decision": "fix", "reason": "4th", "fix": fix}
    ).json()
    assert fixed["review"] == "pending" and fixed["version"] == 3
    own = boss.post(f"/api/annotations/{a['id']}/review", json={"version": 3, "decision": "approve"})
    assert own.status_code == 403
    done = rev.post(f"/api/annotations/{a['id']}/review", json={"version": 3, "decision": "approve"})
    assert done.status_code == 200 and done.json()["review"] == "approved"
    # Its author may still not review it, whoever changed it last.
    assert ann.post(f"/api/annotations/{a['id']}/review", json={"version": 4, "decision": "approve"}).status_code == 403


def test_provenance_is_the_servers_and_outcomes_come_from_the_mask(tmp_path, docs, tiny_proposer):
    """The model version, the candidate and the clicks of a save come from the proposal the server recorded; the
    server decides from the saved mask whether it is the candidate as proposed (accepted, or refined after clicks)
    or an edit; stats and exports show them apart."""
    from docjepa.apps.engine import masks, stats
    from docjepa.apps.engine.app import ServerConfig, create_app
    from docjepa.apps.engine.export import export

    url = f"sqlite:///{tmp_path / 'p.db'}"
    db = make_engine(url, docs, pages=6)
    app = create_app(ServerConfig(db=url), proposer=tiny_proposer)
    ann, bob = client_for(app, "ann"), client_for(app, "bob")

    def ask(path="propose", **extra):
        task = ann.post("/api/tasks/next").json()
        prop = ann.post(f"/api/tasks/{task['id']}/{path}", json={"question": task["question"], **extra})
        assert prop.status_code == 200, prop.text
        return task, prop.json()

    def with_another_word(task, candidate):  # a candidate's mask with a word it does not hold added
        h, w = task["page"]["height"], task["page"]["width"]
        extra = next(i for i in range(len(task["page"]["words"])) if i not in candidate["word_ids"])
        return mask_png(masks.from_png(candidate["png"], h, w) | word_mask(task["page"], [extra]))

    def save(task, body):
        return ann.post(f"/api/tasks/{task['id']}/annotation", json={"question": task["question"], **body})

    # Accepted as proposed: the candidate's own mask, sent back as the page sends it (a forged version ignored).
    task, prop = ask()
    k = next(c["index"] for c in prop["candidates"] if not c["empty"])
    base = {"proposal_id": prop["proposal_id"], "candidate": k, "model_version": "$forged"}
    assert save(task, base | {"candidate": 7, "mask_png": prop["candidates"][k]["png"]}).status_code == 422
    accepted = save(task, base | {"mask_png": prop["candidates"][k]["png"]}).json()
    assert (accepted["outcome"], accepted["candidate"], accepted["clicks"]) == ("accepted", k, 0)
    assert accepted["model_version"] == prop["model_version"] != "$forged"
    # Edited: the candidate changed by hand (it still says which candidate it started from).
    task, prop = ask()
    body = {
        "proposal_id": prop["proposal_id"],
        "candidate": 0,
        "mask_png": with_another_word(task, prop["candidates"][0]),
    }
    edited = save(task, body).json()
    assert (edited["outcome"], edited["candidate"]) == ("edited", 0)
    # Refined: the model answered a click, and its answer was saved as it gave it.
    task, prop = ask()
    x0, y0, x1, y1 = task["page"]["words"][0]["box"]
    point = {"points": [[(x0 + x1) / 2, (y0 + y1) / 2]], "labels": [1]}
    again = ann.post(f"/api/tasks/{task['id']}/refine", json={"question": task["question"], **point}).json()
    j = next(c["index"] for c in again["candidates"] if not c["empty"])
    body = {"proposal_id": again["proposal_id"], "candidate": j, "mask_png": again["candidates"][j]["png"]}
    refined = save(task, body).json()
    assert (refined["outcome"], refined["clicks"], refined["candidate"]) == ("refined", 1, j)
    # The author's later edit makes it an edit; back to the candidate's mask, it is the candidate again.
    put = {"question": task["question"], "mask_png": with_another_word(task, again["candidates"][j]), "version": 1}
    assert ann.put(f"/api/annotations/{refined['id']}", json=put).json()["outcome"] == "edited"
    back = put | {"mask_png": again["candidates"][j]["png"], "version": 2}
    assert ann.put(f"/api/annotations/{refined['id']}", json=back).json()["outcome"] == "refined"
    # A proposal made for another task, or for another person, is refused.
    task, prop = ask()
    other = bob.post("/api/tasks/next").json()
    body = {"proposal_id": prop["proposal_id"], "candidate": 0, "mask_png": mask_png(word_mask(other["page"], [0]))}
    foreign = bob.post(f"/api/tasks/{other['id']}/annotation", json={"question": other["question"], **body})
    assert foreign.status_code == 422 and "not made for this task" in foreign.json()["detail"]
    # Stats and exports show the outcomes apart.
    s = stats.compute(db)["by_person"]["ann"]
    assert (s["accepted_as_is_rate"], s["edited_rate"], s["refined_rate"]) == (1 / 3, 1 / 3, 1 / 3)
    export(db, "jsonl", tmp_path / "x")
    rows = [json.loads(line) for line in (tmp_path / "x" / "annotations.jsonl").read_text().splitlines()]
    assert sorted((r["outcome"], r["accepted_candidate"]) for r in rows) == sorted(
        [("accepted", k), ("edited", None), ("refined", j)]
    )
    db.dispose()


def test_the_model_tool_on_a_saved_annotation_is_a_recorded_proposal(tmp_path, docs, tiny_proposer):
    """Refining an annotation already saved (its author, or a reviewer) records the model's answer like any other
    proposal; a change that saves its candidate as given is ``refined``, counted as such, and a proposal made for
    someone else or another task is refused."""
    from sqlalchemy import select

    from docjepa.apps.engine import masks, stats
    from docjepa.apps.engine.app import ServerConfig, create_app
    from docjepa.apps.engine.tables import Proposal

    url = f"sqlite:///{tmp_path / 'r.db'}"
    db = make_engine(url, docs, pages=6)
    app = create_app(ServerConfig(db=url), proposer=tiny_proposer)
    ann, rev = client_for(app, "ann"), client_for(app, "rev")
    saved = []
    for _ in range(2):
        task = ann.post("/api/tasks/next").json()
        body = {"question": task["question"], "mask_png": mask_png(word_mask(task["page"], [0]))}
        saved.append((task, ann.post(f"/api/tasks/{task['id']}/annotation", json=body).json()))
    (task, a), (other_task, b) = saved
    assert a["outcome"] == "drawn" and a["proposal_id"] is None
    x0, y0, x1, y1 = task["page"]["words"][1]["box"]
    click = {"question": task["question"], "points": [[(x0 + x1) / 2, (y0 + y1) / 2]], "labels": [1]}
    again = ann.post(f"/api/annotations/{a['id']}/refine", json=click).json()
    with db.read() as s:
        p = s.get(Proposal, again["proposal_id"])
        assert (p.task_id, p.kind, p.clicks, p.model_version) == (task["id"], "refine", 1, again["model_version"])
    j = next(c["index"] for c in again["candidates"] if not c["empty"])
    put = {"question": task["question"], "version": 1, "proposal_id": again["proposal_id"], "candidate": j}
    refined = ann.put(f"/api/annotations/{a['id']}", json=put | {"mask_png": again["candidates"][j]["png"]}).json()
    assert (refined["outcome"], refined["proposal_id"], refined["candidate"]) == ("refined", again["proposal_id"], j)
    assert refined["clicks"] == 1 and refined["model_version"] == again["model_version"]
    assert masks.decode(refined["mask"]).any()
    assert stats.compute(db)["by_person"]["ann"]["refined_rate"] == 1 / 2
    # A reviewer's Model tool on ann's annotation is the reviewer's proposal: ann cannot save with it, rev can.
    theirs = rev.post(f"/api/annotations/{b['id']}/refine", json=click | {"question": other_task["question"]})
    theirs = theirs.json()
    k = next(c["index"] for c in theirs["candidates"] if not c["empty"])
    fix = {"question": other_task["question"], "version": 1, "proposal_id": theirs["proposal_id"], "candidate": k}
    fix["mask_png"] = theirs["candidates"][k]["png"]
    refused = ann.put(f"/api/annotations/{b['id']}", json=fix)
    assert refused.status_code == 422 and "not made for this task and this person" in refused.json()["detail"]
    wrong_task = ann.put(f"/api/annotations/{b['id']}", json=fix | {"proposal_id": again["proposal_id"]})
    assert wrong_task.status_code == 422
    by_rev = rev.put(f"/api/annotations/{b['id']}", json=fix | {"reason": "the value, not its label"}).json()
    rev_id = rev.get("/api/me").json()["id"]
    assert (by_rev["outcome"], by_rev["edited_by"], by_rev["user_id"]) == ("refined", rev_id, b["user_id"])
    with db.read() as s:
        kinds = [(p.kind, p.user_id) for p in s.scalars(select(Proposal).order_by(Proposal.id))]
    assert kinds == [("refine", b["user_id"]), ("refine", rev_id)]
    db.dispose()


def test_skip_hands_out_another_task_and_signing_out_gives_leases_back(engine, monkeypatch):
    from docjepa.apps.engine import store
    from docjepa.apps.engine.store import tasks

    app = _csrf_app(engine)
    _, db = engine
    ann = client_for(app, "ann")
    first = ann.post("/api/tasks/next").json()
    seen = [first["id"]]
    for _ in range(3):  # → three times: each time another task, never the one just passed over
        assert ann.post(f"/api/tasks/{seen[-1]}/release").status_code == 200
        seen.append(ann.post("/api/tasks/next").json()["id"])
    assert len(set(seen)) == 4
    bob = client_for(app, "bob")
    assert bob.post("/api/tasks/next").json()["id"] == first["id"]  # a skip is the skipper's alone
    # Once the lease would have ended (bob's too, here), a skipped task comes back to its skipper.
    assert ann.post(f"/api/tasks/{seen[-1]}/release").status_code == 200
    t = tasks.now() + store.LEASE_SECONDS + 1
    monkeypatch.setattr(tasks, "now", lambda: t)
    assert ann.post("/api/tasks/next").json()["id"] == first["id"]
    monkeypatch.undo()
    held = ann.post("/api/tasks/next").json()["id"]
    assert held == first["id"] and ann.post("/api/logout").status_code == 200
    from docjepa.apps.engine.tables import Task

    with db.read() as s:
        assert s.get(Task, held).lease_user_id is None  # signing out gave the lease back


def test_candidates_are_the_boxes_of_their_words(tmp_path, docs, tiny_proposer):
    from docjepa.apps.engine import masks, store
    from docjepa.apps.engine.app import ServerConfig, create_app

    url = f"sqlite:///{tmp_path / 'e.db'}"
    db = make_engine(url, docs, pages=3, users=("ann",))
    ann = client_for(create_app(ServerConfig(db=url), proposer=tiny_proposer), "ann")
    checked = 0
    for _ in range(4):
        task = ann.post("/api/tasks/next").json()
        page = store.page_info(db, task["page_id"])
        got = ann.post(f"/api/tasks/{task['id']}/propose", json={"question": task["question"]}).json()
        for c in got["candidates"]:
            drawn = masks.from_png(c["png"], page["height"], page["width"])
            if c["word_ids"]:
                assert np.array_equal(drawn, masks.words_mask(page["words"], c["word_ids"], *drawn.shape))
                checked += 1
        ann.post(f"/api/tasks/{task['id']}/annotation", json={"question": task["question"], "answerable": False})
    assert checked > 0
    db.dispose()


def test_refine_coordinates_must_be_finite_numbers_on_a_page(engine):
    app = _csrf_app(engine)  # no model: a body that passes validation is answered 503
    ann = client_for(app, "ann")
    task = ann.post("/api/tasks/next").json()
    url = f"/api/tasks/{task['id']}/refine"
    base = {"question": task["question"]}
    bad = [
        {"points": [["NaN", 5]], "labels": [1]},
        {"points": [[5, "Infinity"]], "labels": [1]},
        {"points": [[1e308, 5]], "labels": [1]},
        {"points": [[5, -1e308]], "labels": [0]},
        {"box": [0, 0, "NaN", 10]},
        {"box": [0, 0, 10, 1e308]},
        {"box": ["-Infinity", 0, 10, 10]},
    ]
    for extra in bad:
        r = ann.post(url, json=base | extra)
        assert r.status_code == 422, (extra, r.text)
    assert ann.post(url, json=base | {"points": [[12.5, 30]], "labels": [1], "box": [0, 0, 40, 20]}).status_code == 503
    for seconds in ("NaN", "Infinity"):
        body = {"question": task["question"], "answerable": False, "seconds": seconds}
        assert ann.post(f"/api/tasks/{task['id']}/annotation", json=body).status_code == 422


def test_the_audit_of_an_annotation_that_does_not_exist_is_404(engine):
    app = _csrf_app(engine)
    ann, rev = client_for(app, "ann"), client_for(app, "rev")
    task = ann.post("/api/tasks/next").json()
    a = ann.post(f"/api/tasks/{task['id']}/annotation", json={"question": task["question"], "answerable": False})
    assert [e["action"] for e in rev.get(f"/api/annotations/{a.json()['id']}/audit").json()] == ["create"]
    missing = rev.get("/api/annotations/99999999/audit")
    assert missing.status_code == 404 and "no annotation 99999999" in missing.json()["detail"]


def _serve(monkeypatch, db_url: str, *options: str):
    """``docjepa engine serve`` as a user starts it, up to uvicorn: the app and uvicorn's settings."""
    import uvicorn

    from docjepa.apps.cli import main

    got = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: got.update(app=app, **kw))
    main(["engine", "serve", "--db", db_url, "--no-model", *options])
    return got


def test_the_session_cookie_is_secure_unless_served_on_loopback(engine, monkeypatch, tmp_path):
    from fastapi.testclient import TestClient

    _, db = engine
    url = db.url

    def cookie(*options):
        app = _serve(monkeypatch, url, "--media", str(tmp_path / "media"), *options)["app"]
        r = TestClient(app).post("/api/login", json={"name": "ann", "password": PASSWORD})
        assert r.status_code == 200
        return r.headers["set-cookie"].lower()

    assert "secure" not in cookie()  # 127.0.0.1, the default host
    assert "secure" not in cookie("--host", "::1")
    assert "secure" in cookie("--host", "0.0.0.0")
    assert "secure" in cookie("--host", "10.1.2.3")
    assert "secure" not in cookie("--host", "0.0.0.0", "--no-secure-cookie")  # said explicitly
    assert "secure" in cookie("--secure-cookie")


def test_serve_with_several_workers_hands_each_its_configuration(engine, monkeypatch, tmp_path):
    """``serve --workers 2``: uvicorn starts the app factory in each worker process, which reads the same
    configuration from the environment and serves the same database."""
    import json

    from fastapi.testclient import TestClient

    from docjepa.apps.engine.app import CONFIG_ENV, app_from_environment

    _, db = engine
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    got = _serve(monkeypatch, db.url, "--media", str(tmp_path / "media"), "--workers", "2", "--lease-minutes", "3")
    assert (got["app"], got["factory"], got["workers"]) == ("docjepa.apps.engine.app:app_from_environment", True, 2)
    cfg = json.loads(__import__("os").environ[CONFIG_ENV])
    assert (cfg["db"], cfg["lease_seconds"], cfg["checkpoint"]) == (db.url, 180.0, None)
    worker = app_from_environment()
    r = TestClient(worker).post("/api/login", json={"name": "ann", "password": PASSWORD})
    assert r.status_code == 200 and worker.state.cfg.lease_seconds == 180.0
    one = _serve(monkeypatch, db.url, "--media", str(tmp_path / "media"))  # no model: one process by default
    assert one["workers"] == 1 and not isinstance(one["app"], str)


def test_forwarded_for_headers_are_believed_only_from_named_proxies(engine, monkeypatch, tmp_path):
    """Rotating X-Forwarded-For from loopback made one counter per forged address; by default no proxy is trusted,
    so every failure counts against the address the client connects from."""
    import socket
    import time

    import httpx
    import uvicorn

    _, db = engine
    options = _serve(monkeypatch, db.url, "--media", str(tmp_path / "media"))
    app = options.pop("app")
    assert options["proxy_headers"] is False
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        options["port"] = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, **options | {"log_level": "warning"}))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{options['port']}"
        for _ in range(100):
            if server.started:
                break
            time.sleep(0.05)
        for i in range(6):
            headers = {"X-Forwarded-For": f"203.0.113.{i}"}
            r = httpx.post(f"{base}/api/login", json={"name": f"nobody{i}", "password": "x"}, headers=headers)
            assert r.status_code == 403
    finally:
        server.should_exit = True
        thread.join(timeout=10)
    addresses = {e["after"]["keys"][-1] for e in _sign_ins(db)}
    assert addresses == {"addr:127.0.0.1"}
    trusted = _serve(monkeypatch, db.url, "--media", str(tmp_path / "m2"), "--forwarded-allow-ips", "10.0.0.2")
    assert trusted["proxy_headers"] is True and trusted["forwarded_allow_ips"] == "10.0.0.2"


def test_names_in_the_dashboard_figure_are_drawn_as_plain_text(engine):
    """A model version such as ``$\\notacommand$`` made the figure fail (matplotlib parsed it as mathtext) and
    ``/api/stats/plot.png`` answer 500 for everyone."""
    from docjepa.apps.engine import stats

    app = _csrf_app(engine)
    ann, rev = client_for(app, "ann"), client_for(app, "rev")
    for version in (r"$\notacommand$", "$x^{2$", "plain"):
        task = ann.post("/api/tasks/next").json()
        body = {"question": task["question"], "answerable": False, "model_version": version}
        assert ann.post(f"/api/tasks/{task['id']}/annotation", json=body).is_success
    r = rev.get("/api/stats/plot.png")
    assert r.status_code == 200 and r.headers["content-type"] == "image/png" and r.content[:4] == b"\x89PNG"
    assert stats.plain(r"$\notacommand$") == r"\$\notacommand\$"
