"""Many annotators at once: saves from the same version, task leases pulled by many workers, and a server
killed with SIGKILL in the middle of a stream of saves."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from .conftest import PASSWORD, make_engine, word_mask

THREADS = 8


def _answer(task, ids, reason=""):
    from docjepa.apps.engine.store import Answer

    return Answer(task["question"], True, word_mask(task["page"], ids), seconds=1.0, edits=len(ids), reason=reason)


def test_same_version_saves_one_wins_the_rest_get_409_and_all_are_audited(db_url, docs):
    from docjepa.apps.engine import store

    db = make_engine(db_url, docs, pages=2)
    uid = {u["name"]: u for u in store.list_users(db)}
    ann = uid["ann"]
    task = store.claim_next(db, ann["id"])
    a = store.create_annotation(db, task["id"], ann["id"], _answer(task, [0]))
    rev = uid["rev"]  # a reviewer may edit anyone's annotation: all threads are allowed, only the version decides
    results, barrier = [], threading.Barrier(THREADS)

    def save(i: int) -> None:
        barrier.wait()
        try:
            out = store.update_annotation(db, a["id"], 1, rev, _answer(task, [i + 1], reason="a reviewer's edit"))
            results.append(("ok", i, out["version"]))
        except store.Conflict as err:
            results.append(("409", i, err.current["version"]))

    threads = [threading.Thread(target=save, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wins = [r for r in results if r[0] == "ok"]
    assert len(results) == THREADS and len(wins) == 1 and wins[0][2] == 2
    assert all(r[2] == 2 for r in results if r[0] == "409")  # each loser saw the winner's version
    final = store.get_annotation(db, a["id"])
    assert final["version"] == 2 and final["word_ids"] == [wins[0][1] + 1]
    log = store.audit_log(db, a["id"])
    assert sorted(e["action"] for e in log) == ["conflict"] * (THREADS - 1) + ["create", "update"]
    tried = {e["after"]["word_ids"][0] for e in log if e["action"] in ("update", "conflict")}
    assert tried == set(range(1, THREADS + 1))  # every attempt's content is in the log: nothing lost
    assert db.integrity_problems() == []
    db.dispose()


def test_leases_many_workers_never_get_the_same_task(db_url, docs):
    from docjepa.apps.engine import store

    db = make_engine(db_url, docs, pages=4, users=())
    workers = [store.add_user(db, f"w{i}", "annotator", PASSWORD) for i in range(THREADS)]
    total = store.counts(db)["tasks_open"]
    got: list[tuple[int, int]] = []
    lock, barrier = threading.Lock(), threading.Barrier(THREADS)

    def work(uid: int) -> None:
        barrier.wait()
        while True:
            task = store.claim_next(db, uid)
            if task is None:
                return
            with lock:
                got.append((uid, task["id"]))
            time.sleep(0.005)  # a person holds a task a moment: one thread cannot drain the queue before others start
            store.create_annotation(db, task["id"], uid, store.Answer(task["question"], False, None))

    threads = [threading.Thread(target=work, args=(u,)) for u in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [t for _, t in got]
    assert len(ids) == len(set(ids)) == total  # every task handed out exactly once
    assert len({u for u, _ in got}) > 1  # the work was shared
    assert store.counts(db)["tasks_open"] == 0 and db.integrity_problems() == []
    db.dispose()


def _post(base, path, body, token):
    req = urllib.request.Request(base + path, json.dumps(body).encode(), method="POST")
    req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def _serve(url: str, port: int) -> subprocess.Popen:
    code = (
        "import uvicorn; from docjepa.apps.engine.app import ServerConfig, create_app; "
        f"uvicorn.run(create_app(ServerConfig(db={url!r})), host='127.0.0.1', port={port}, log_level='warning')"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], env=os.environ | {"OMP_NUM_THREADS": "1"})
    for _ in range(300):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1).read()
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the server did not start")


@pytest.mark.slow  # end to end: a real server process started twice and killed
@pytest.mark.parametrize("kill_after", [0.5, 1.5])
def test_sigkill_mid_stream_loses_no_acknowledged_save(tmp_path, docs, kill_after):
    from docjepa.apps.engine import store
    from docjepa.apps.engine.db import Database

    from .conftest import _free_port

    url = f"sqlite:///{tmp_path / 'engine.db'}"
    make_engine(url, docs, pages=24, users=("ann", "bob")).dispose()
    port = _free_port()
    proc = _serve(url, port)
    base = f"http://127.0.0.1:{port}"
    acked: dict[int, int] = {}  # annotation id → acknowledged version
    stop = threading.Event()

    def annotate(name: str) -> None:
        token = _post(base, "/api/login", {"name": name, "password": PASSWORD}, None)["token"]
        while not stop.is_set():
            try:
                task = _post(base, "/api/tasks/next", {}, token)
                a = _post(
                    base,
                    f"/api/tasks/{task['id']}/annotation",
                    {"question": task["question"], "answerable": False},
                    token,
                )
                acked[a["id"]] = a["version"]
            except (OSError, urllib.error.URLError, json.JSONDecodeError):
                return  # the server is gone: this request was in flight

    threads = [threading.Thread(target=annotate, args=(n,)) for n in ("ann", "bob")]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30  # the clock starts at the first acknowledged save (sign-ins take a while)
    while not acked and time.monotonic() < deadline and any(t.is_alive() for t in threads):
        time.sleep(0.01)
    time.sleep(kill_after)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    stop.set()
    for t in threads:
        t.join()
    assert len(acked) >= 3, "too few saves before the kill to test anything"
    db = Database(url)
    assert db.integrity_problems() == []
    for aid, version in acked.items():
        assert store.get_annotation(db, aid)["version"] == version
    # And it serves again: the work goes on where it stopped.
    proc = _serve(url, port)
    try:
        token = _post(base, "/api/login", {"name": "ann", "password": PASSWORD}, None)["token"]
        task = _post(base, "/api/tasks/next", {}, token)
        assert task["id"] not in {store.get_annotation(db, a)["task_id"] for a in acked}
    finally:
        proc.kill()
        proc.wait()
    db.dispose()


def test_a_running_proposal_does_not_block_other_requests(tmp_path, docs, tiny_proposer, monkeypatch):
    """The model works in its own thread: while a proposal is being computed, page loads and saves are answered."""
    import uvicorn

    from docjepa.apps.engine.app import ServerConfig, create_app

    from .conftest import _free_port

    url = f"sqlite:///{tmp_path / 'engine.db'}"
    db = make_engine(url, docs, pages=3, users=("ann", "bob"))
    gate, entered = threading.Event(), threading.Event()
    original = tiny_proposer.model.propose_many

    def gated(*args, **kwargs):
        entered.set()
        assert gate.wait(60), "the other requests never came through"
        return original(*args, **kwargs)

    monkeypatch.setattr(tiny_proposer.model, "propose_many", gated)
    app = create_app(ServerConfig(db=url), proposer=tiny_proposer)
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    base = f"http://127.0.0.1:{port}"
    try:
        ann = _post(base, "/api/login", {"name": "ann", "password": PASSWORD}, None)["token"]
        bob = _post(base, "/api/login", {"name": "bob", "password": PASSWORD}, None)["token"]
        task = _post(base, "/api/tasks/next", {}, ann)
        out: dict = {}
        proposing = threading.Thread(
            target=lambda: out.update(
                _post(base, f"/api/tasks/{task['id']}/propose", {"question": task["question"]}, ann)
            )
        )
        proposing.start()
        assert entered.wait(30)
        # The model is busy (held at the gate); another annotator claims, loads a page and saves.
        other = _post(base, "/api/tasks/next", {}, bob)
        req = urllib.request.Request(
            f"{base}/api/pages/{other['page_id']}/image", headers={"Authorization": f"Bearer {bob}"}
        )
        assert urllib.request.urlopen(req, timeout=30).read().startswith(b"\x89PNG")
        saved = _post(
            base, f"/api/tasks/{other['id']}/annotation", {"question": other["question"], "answerable": False}, bob
        )
        assert "candidates" not in out  # the proposal is still waiting: those requests did not queue behind it
        gate.set()
        proposing.join(60)
        assert len(out["candidates"]) == 3 and saved["version"] == 1
    finally:
        gate.set()
        server.should_exit = True
        thread.join(10)
        db.dispose()


def _gated(proposer):
    """The proposer's model held at a gate: (gate, entered, calls) — the questions of each model call recorded."""
    gate, entered, calls = threading.Event(), threading.Event(), []
    original = proposer.model.propose_many

    def held(page, questions, key=None):
        calls.append(list(questions))
        entered.set()
        assert gate.wait(60)
        return original(page, questions, key=key)

    proposer.model.propose_many = held
    return gate, entered, calls


def test_requests_arriving_together_are_answered_in_one_model_call_and_a_full_queue_says_busy(docs, tiny_model):
    """While the model answers one request, the next ones wait in its queue; the questions about one page among
    them are decoded in one call, with the answers each would get alone; past the queue's bound a request is
    refused at once (Busy: 503 with Retry-After) instead of piling up, and nothing queued is lost."""
    from docjepa.apps.engine.proposer import Busy, Proposer
    from docjepa.data.shards import DocumentDataset

    pages = DocumentDataset(docs / "d")
    page, other = pages[0], pages[1]
    proposer = Proposer(tiny_model, device="cpu", threads=1, queue=4, batch=8)
    try:
        alone = {q.text: proposer.propose_sync(1, page, q.text) for q in page.questions[:3]}
        gate, entered, calls = _gated(proposer)
        first = proposer.submit(2, other, other.questions[0].text)
        assert entered.wait(30)  # the worker holds the first request; the next ones queue
        waiting = [proposer.submit(1, page, q) for q in alone] + [proposer.submit(2, other, other.questions[1].text)]
        with pytest.raises(Busy) as busy:
            proposer.submit(1, page, "One more question?")
        assert busy.value.retry_after >= 1
        gate.set()
        first.result(60)
        answers = [f.result(60) for f in waiting]
        assert calls == [[other.questions[0].text], list(alone), [other.questions[1].text]]
        for (q, expected), (p, version) in zip(alone.items(), answers):
            got = proposer.candidates(page, p, version)
            assert got["best"] == expected["best"] and version == expected["model_version"]
            assert [c["rle"] for c in got["candidates"]] == [c["rle"] for c in expected["candidates"]], q
            assert [c["score"] for c in got["candidates"]] == pytest.approx(
                [c["score"] for c in expected["candidates"]], abs=1e-5
            )
    finally:
        proposer.close()


def test_a_busy_model_answers_503_with_retry_after(tmp_path, docs, tiny_model):

    from docjepa.apps.engine.app import ServerConfig, create_app
    from docjepa.apps.engine.proposer import Proposer

    from .conftest import client_for

    url = f"sqlite:///{tmp_path / 'engine.db'}"
    db = make_engine(url, docs, pages=3, users=("ann", "bob"))
    proposer = Proposer(tiny_model, device="cpu", threads=1, queue=1)
    gate, entered, _ = _gated(proposer)
    app = create_app(ServerConfig(db=url), proposer=proposer)
    ann, bob = client_for(app, "ann"), client_for(app, "bob")
    try:
        tasks = [c.post("/api/tasks/next").json() for c in (ann, bob)]
        proposer.submit(tasks[0]["page_id"], None, "held")  # the worker is busy with this one
        assert entered.wait(30)
        proposer.submit(tasks[0]["page_id"], None, "queued")  # and the queue (of one) is full
        r = bob.post(f"/api/tasks/{tasks[1]['id']}/propose", json={"question": tasks[1]["question"]})
        assert r.status_code == 503 and int(r.headers["retry-after"]) >= 1 and "busy" in r.json()["detail"]
        gate.set()
        again = bob.post(f"/api/tasks/{tasks[1]['id']}/propose", json={"question": tasks[1]["question"]})
        assert again.status_code == 200 and again.json()["proposal_id"]
    finally:
        gate.set()
        proposer.close()
        db.dispose()
