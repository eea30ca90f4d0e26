"""Accounts that can be changed and closed: roles, disabling (sessions and leases end at once), password resets
and one's own change (the current password first), the last admin kept, every change audited; the same from the
command line."""

import json

import pytest

from .conftest import PASSWORD, client_for, make_engine

NEW = "a new passphrase"


@pytest.fixture
def engine(tmp_path, docs):
    from docjepa.apps.engine.app import ServerConfig, create_app

    url = f"sqlite:///{tmp_path / 'e.db'}"
    db = make_engine(url, docs, pages=4)
    yield create_app(ServerConfig(db=url), proposer=None), db, url
    db.dispose()


def _ids(boss) -> dict:
    return {u["name"]: u["id"] for u in boss.get("/api/users").json()}


def _user_audit(db) -> list[tuple[str, int | None]]:
    from docjepa.apps.engine import store

    return [
        (e["action"], e["user_id"]) for e in store.audit_log(db) if e["entity"] == "user" and e["action"] != "create"
    ]


def test_a_disabled_account_loses_its_sessions_and_leases_at_once(engine):
    from fastapi.testclient import TestClient

    app, db, _ = engine
    boss, ann, bob = (client_for(app, n) for n in ("boss", "ann", "bob"))
    ids = _ids(boss)
    held = ann.post("/api/tasks/next").json()
    r = boss.patch(f"/api/users/{ids['ann']}", json={"active": False})
    assert r.status_code == 200 and r.json()["sessions_ended"] == 1 and r.json()["tasks_released"] == 1
    assert ann.get("/api/me").status_code == 401  # the open session ended with the account
    login = TestClient(app).post("/api/login", json={"name": "ann", "password": PASSWORD})
    assert login.status_code == 403
    taken = [bob.post("/api/tasks/next").json()["id"] for _ in range(4)]
    assert held["id"] in taken  # the task ann held is open to others at once
    assert boss.patch(f"/api/users/{ids['ann']}", json={"active": True}).json()["active"] is True
    assert client_for(app, "ann").get("/api/me").json()["name"] == "ann"
    assert _user_audit(db) == [("disable", ids["boss"]), ("enable", ids["boss"])]


def test_a_new_role_applies_to_the_next_request(engine):
    app, db, _ = engine
    boss, rev = client_for(app, "boss"), client_for(app, "rev")
    ids = _ids(boss)
    assert rev.get("/api/review/next").status_code in (200, 404)
    assert boss.patch(f"/api/users/{ids['rev']}", json={"role": "annotator"}).json()["role"] == "annotator"
    assert rev.get("/api/review/next").status_code == 403
    assert boss.patch(f"/api/users/{ids['rev']}", json={}).status_code == 422  # nothing to change
    assert boss.patch(f"/api/users/{ids['rev']}", json={"role": "owner"}).status_code == 422
    assert boss.patch("/api/users/999999", json={"role": "admin"}).status_code == 404
    assert rev.patch(f"/api/users/{ids['rev']}", json={"role": "admin"}).status_code == 403  # only admins
    assert _user_audit(db) == [("role", ids["boss"])]


def test_the_last_active_admin_is_kept(engine):
    app, _, _ = engine
    boss = client_for(app, "boss")
    ids = _ids(boss)
    for change in ({"role": "reviewer"}, {"active": False}):
        r = boss.patch(f"/api/users/{ids['boss']}", json=change)
        assert r.status_code == 422 and "last active admin" in r.json()["detail"]
    assert boss.patch(f"/api/users/{ids['rev']}", json={"role": "admin"}).is_success
    assert boss.patch(f"/api/users/{ids['boss']}", json={"role": "reviewer"}).is_success  # now another one exists


def test_an_admin_reset_ends_every_session_of_the_account(engine):
    from fastapi.testclient import TestClient

    app, db, _ = engine
    boss, ann = client_for(app, "boss"), client_for(app, "ann")
    ids = _ids(boss)
    assert boss.post(f"/api/users/{ids['ann']}/password", json={"password": "short"}).status_code == 422
    r = boss.post(f"/api/users/{ids['ann']}/password", json={"password": NEW})
    assert r.status_code == 200 and r.json()["sessions_ended"] == 1
    assert ann.get("/api/me").status_code == 401
    anon = TestClient(app)
    assert anon.post("/api/login", json={"name": "ann", "password": PASSWORD}).status_code == 403
    assert anon.post("/api/login", json={"name": "ann", "password": NEW}).status_code == 200
    entries = [
        e for e in __import__("docjepa.apps.engine.store", fromlist=["x"]).audit_log(db) if e["entity"] == "user"
    ]
    assert NEW not in json.dumps(entries) and "argon2" not in json.dumps(entries)  # no secret in the audit log


def test_people_change_their_own_password_with_the_current_one(engine):
    app, db, _ = engine
    here, elsewhere = client_for(app, "ann"), client_for(app, "ann")
    wrong = here.post("/api/me/password", json={"old": "not it at all", "new": NEW})
    assert wrong.status_code == 403 and "current password" in wrong.json()["detail"]
    assert here.post("/api/me/password", json={"old": PASSWORD, "new": "short"}).status_code == 422
    ok = here.post("/api/me/password", json={"old": PASSWORD, "new": NEW})
    assert ok.status_code == 200 and ok.json()["sessions_ended"] == 1
    assert here.get("/api/me").status_code == 200  # the session that changed it goes on
    assert elsewhere.get("/api/me").status_code == 401  # the others end
    uid = here.get("/api/me").json()["id"]
    assert _user_audit(db) == [("password", uid)]


def test_the_command_line_changes_accounts_too(engine, capsys, monkeypatch):
    from fastapi.testclient import TestClient

    from docjepa.apps.cli import main

    app, db, url = engine
    ann = client_for(app, "ann")

    def run(*argv):
        main(["engine", "user", *argv, "--db", url])
        return json.loads(capsys.readouterr().out)

    assert run("role", "bob", "reviewer")["role"] == "reviewer"
    assert run("disable", "ann")["sessions_ended"] == 1 and ann.get("/api/me").status_code == 401
    assert run("enable", "ann")["active"] is True
    monkeypatch.setenv("ANN_PASSWORD", NEW)
    assert run("passwd", "ann", "--password-env", "ANN_PASSWORD")["name"] == "ann"
    assert TestClient(app).post("/api/login", json={"name": "ann", "password": NEW}).status_code == 200
    listed = {u["name"]: u for u in run("list")}
    assert listed["bob"]["role"] == "reviewer" and listed["ann"]["active"] is True
    assert [a for a, _ in _user_audit(db)] == ["role", "disable", "enable", "password"]
    with pytest.raises(SystemExit) as err:
        main(["engine", "user", "disable", "nobody", "--db", url])
    assert err.value.code == 2 and "no user 'nobody'" in capsys.readouterr().err


@pytest.mark.slow  # a real browser
def test_the_page_changes_accounts_and_ones_own_password(tmp_path, docs, tiny_proposer):
    """An admin disables an account, changes a role and sets a password from the dashboard; a person changes
    their own password from the page."""
    import threading
    import time

    import uvicorn
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    from docjepa.apps.engine import store
    from docjepa.apps.engine.app import ServerConfig, create_app

    from .conftest import _free_port
    from .test_browser import _browser, _sign_in

    url = f"sqlite:///{tmp_path / 'engine.db'}"
    db = make_engine(url, docs, pages=2)
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(ServerConfig(db=url), proposer=tiny_proposer), port=port, log_level="warning")
    )
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    driver = _browser()
    try:
        wait = WebDriverWait(driver, 30)
        driver.get(f"http://127.0.0.1:{port}/")
        _sign_in(driver, wait, "boss")
        driver.find_element(By.ID, "nav-dashboard").click()
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#accounts tr[data-id]")) == 4)

        def row(name):  # the table is drawn again after each change: look the row up afresh
            def find(d):
                try:
                    rows = d.find_elements(By.CSS_SELECTOR, "#accounts tr[data-id]")
                    return next((r for r in rows if r.find_element(By.TAG_NAME, "td").text == name), False)
                except StaleElementReferenceException:
                    return False

            return wait.until(find)

        def status_says(text):
            wait.until(lambda d: text in d.find_element(By.ID, "accounts-status").text)

        row("ann").find_element(By.CSS_SELECTOR, "button[data-action=disable]").click()
        status_says("ann: disabled")
        Select(row("rev").find_element(By.TAG_NAME, "select")).select_by_visible_text("annotator")
        status_says("rev: role annotator")
        row("bob").find_element(By.TAG_NAME, "input").send_keys(NEW)
        row("bob").find_element(By.CSS_SELECTOR, "button[data-action=password]").click()
        status_says("bob: password set")
        users = {u["name"]: u for u in store.list_users(db)}
        assert users["ann"]["active"] is False and users["rev"]["role"] == "annotator"
        driver.find_element(By.ID, "logout").click()

        field = wait.until(lambda d: d.find_element(By.ID, "login-name"))  # bob, with the password the admin set
        wait.until(lambda d: field.is_displayed())
        field.clear()
        field.send_keys("bob")
        driver.find_element(By.ID, "login-password").send_keys(NEW)
        driver.find_element(By.ID, "login-submit").click()
        wait.until(lambda d: d.execute_script("return !!(window.engine.user && window.engine.user.name === 'bob')"))
        driver.find_element(By.ID, "nav-password").click()
        driver.find_element(By.ID, "password-old").send_keys(NEW)
        driver.find_element(By.ID, "password-new").send_keys("bob's own passphrase")
        driver.find_element(By.ID, "password-again").send_keys("bob's own passphrase")
        driver.find_element(By.ID, "password-submit").click()
        wait.until(lambda d: "changed" in d.find_element(By.ID, "password-status").text)
    finally:
        driver.quit()
        server.should_exit = True
    from fastapi.testclient import TestClient

    anon = TestClient(create_app(ServerConfig(db=url), proposer=None))
    assert anon.post("/api/login", json={"name": "bob", "password": "bob's own passphrase"}).status_code == 200
    assert anon.post("/api/login", json={"name": "ann", "password": PASSWORD}).status_code == 403
    db.dispose()
