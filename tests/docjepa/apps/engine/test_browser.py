"""The annotation page in a real browser (Debian's chromium + chromium-driver through Selenium): sign in, see
the model's proposals, accept one, fix another by clicking two words, submit; the rows are in the database."""

import shutil
import threading
import time
from pathlib import Path

import pytest

from .conftest import PASSWORD, _free_port, make_engine

ROOT = Path(__file__).resolve().parents[4]
SCREENSHOT = ROOT / "runs" / "engine" / "screenshot.png"


def _browser():
    pytest.importorskip("selenium")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not chromium or not driver:
        pytest.skip(
            "chromium or chromedriver missing (Debian: apt-get install chromium chromium-driver; make setup tries)"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,1000",
    ):
        opts.add_argument(arg)
    opts.binary_location = chromium
    return webdriver.Chrome(service=Service(driver), options=opts)


@pytest.fixture
def served(tmp_path, docs, tiny_proposer):
    import uvicorn

    from docjepa.apps.engine.app import ServerConfig, create_app

    url = f"sqlite:///{tmp_path / 'engine.db'}"
    db = make_engine(url, docs, pages=3, users=("ann", "rev"))
    app = create_app(ServerConfig(db=url), proposer=tiny_proposer)
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(200):
        if server.started:
            break
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}", db
    server.should_exit = True
    thread.join(10)
    db.dispose()


def _click_word(driver, index: int, right: bool = False) -> None:
    """A real click (``right``: a right-click) at the centre of word ``index``, the page scrolled to show it first
    (it may be zoomed in)."""
    from selenium.webdriver.common.actions.action_builder import ActionBuilder

    x, y = driver.execute_script(
        "const e = window.engine, b = e.page.words[arguments[0]].box.map(Math.round);"
        "const w = document.getElementById('stage-wrap');"
        "const cx = (b[0] + b[2]) / 2 * e.scale, cy = (b[1] + b[3]) / 2 * e.scale;"
        "w.scrollLeft = cx - w.clientWidth / 2; w.scrollTop = cy - w.clientHeight / 2;"
        "const r = document.getElementById('pointer-layer').getBoundingClientRect();"
        "return [r.left + cx, r.top + cy];",
        index,
    )
    action = ActionBuilder(driver)
    pointer = action.pointer_action.move_to_location(int(x), int(y))
    pointer.context_click() if right else pointer.click()
    action.perform()


def _click_at(driver, x: float, y: float) -> None:
    """A real click at page pixel (x, y), the page scrolled to show it first."""
    from selenium.webdriver.common.actions.action_builder import ActionBuilder

    sx, sy = driver.execute_script(
        "const e = window.engine, w = document.getElementById('stage-wrap');"
        "const cx = arguments[0] * e.scale, cy = arguments[1] * e.scale;"
        "w.scrollLeft = cx - w.clientWidth / 2; w.scrollTop = cy - w.clientHeight / 2;"
        "const r = document.getElementById('pointer-layer').getBoundingClientRect();"
        "return [r.left + cx, r.top + cy];",
        x,
        y,
    )
    action = ActionBuilder(driver)
    action.pointer_action.move_to_location(int(sx), int(sy)).click()
    action.perform()


def _painted_at(driver, x: float, y: float) -> bool:
    return driver.execute_script(
        "return document.getElementById('mask').getContext('2d')"
        ".getImageData(Math.round(arguments[0]), Math.round(arguments[1]), 1, 1).data[3] > 0;",
        x,
        y,
    )


@pytest.mark.slow  # a real browser, two accounts, the model answering clicks
def test_the_pages_loose_ends_are_tied(served):
    """Shortcuts work after a click in the read-only question; the status line stays in view at 1400 × 1000; a
    positive click on blank page gives the documented square; the Model tool works on a previous annotation and in
    Review; Review's Next shows another annotation each time."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    from docjepa.apps.engine import masks, store

    base, db = served
    driver = _browser()
    try:
        wait = WebDriverWait(driver, 30)
        driver.get(base + "/")
        _sign_in(driver, wait, "ann")
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".candidate.selected")) == 1)
        question = driver.find_element(By.ID, "question")
        assert question.get_attribute("readonly") is not None
        question.click()  # focus in the read-only question: the keys still reach the page
        question.send_keys("b")
        assert driver.execute_script("return window.engine.tool") == "box"
        in_view = (
            "const r = document.getElementById('status').getBoundingClientRect();"
            "return r.top >= 0 && r.bottom <= window.innerHeight && r.height > 0;"
        )
        assert driver.execute_script(in_view)
        # A positive click far from every word: the answer holds that point (a square one line high there).
        x, y = driver.execute_script(
            "const e = window.engine, W = e.page.width, H = e.page.height, m = 40;"
            "const far = (x, y) => e.page.words.every(w => x < w.box[0] - m || x > w.box[2] + m ||"
            " y < w.box[1] - m || y > w.box[3] + m);"
            "for (let y = H - 60; y > 60; y -= 20) for (let x = 60; x < W - 60; x += 20) if (far(x, y)) return [x, y];"
            "return [null, null];"
        )
        assert x is not None, "no blank spot on the page"
        driver.find_element(By.TAG_NAME, "body").send_keys("k")
        _click_at(driver, x, y)
        wait.until(lambda d: "answered again" in d.find_element(By.ID, "status").text)
        assert _painted_at(driver, x, y)
        assert driver.execute_script(in_view)
        first = driver.execute_script("return window.engine.task.id")
        driver.find_element(By.TAG_NAME, "body").send_keys(Keys.ENTER)
        wait.until(
            lambda d: d.execute_script("return window.engine.task && window.engine.task.id") not in (None, first)
        )
        saved = {a["task_id"]: a for a in store.my_annotations(db, 1)}[first]
        assert saved["outcome"] == "refined" and masks.decode(saved["mask"])[round(y), round(x)]  # the square, kept
        # Save one more, so that two wait for review.
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".candidate.selected")) == 1)
        second = driver.execute_script("return window.engine.task.id")
        driver.find_element(By.TAG_NAME, "body").send_keys(Keys.ENTER)
        wait.until(
            lambda d: d.execute_script("return window.engine.task && window.engine.task.id") not in (None, second)
        )
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".candidate.selected")) == 1)
        # ← opens a previous annotation; the Model tool answers there too.
        driver.find_element(By.TAG_NAME, "body").send_keys(Keys.ARROW_LEFT)
        wait.until(lambda d: "your annotation" in d.find_element(By.ID, "status").text)  # opened, page drawn
        driver.find_element(By.TAG_NAME, "body").send_keys("k")
        _click_word(driver, 0)
        wait.until(lambda d: "answered again" in d.find_element(By.ID, "status").text)
        assert len(driver.find_elements(By.CSS_SELECTOR, ".candidate")) == 3
        driver.find_element(By.ID, "logout").click()

        # Review: Next shows another annotation each time; the Model tool answers there too.
        _sign_in(driver, wait, "rev")
        shown = (  # the status says whose answer it is once the annotation is open and its page drawn
            "const a = window.engine.annotation;"
            "return /by user/.test(document.getElementById('status').textContent) && a ? a.id : null;"
        )
        seen = [wait.until(lambda d: d.execute_script(shown))]  # opened, page drawn, status said
        for _ in range(2):
            driver.find_element(By.ID, "review-next").click()
            seen.append(
                wait.until(
                    lambda d, last=seen[-1]: (d.execute_script(shown) or last) != last and d.execute_script(shown)
                )
            )
        assert seen[0] != seen[1] and seen[1] != seen[2] and seen[2] == seen[0]  # two pending: in turn
        driver.find_element(By.TAG_NAME, "body").send_keys("k")
        _click_word(driver, 0)
        wait.until(lambda d: "answered again" in d.find_element(By.ID, "status").text)
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE" and "/api/me" not in e["message"]]
        assert errors == []
    finally:
        driver.quit()


def test_annotate_in_a_real_browser(served):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    from docjepa.apps.engine import store

    base, db = served
    driver = _browser()
    try:
        wait = WebDriverWait(driver, 30)
        driver.get(base + "/")
        wait.until(EC.visibility_of_element_located((By.ID, "login-name"))).send_keys("ann")
        driver.find_element(By.ID, "login-password").send_keys(PASSWORD)
        driver.find_element(By.ID, "login-submit").click()

        # Task 1: the proposals appear with the best pre-selected; Enter accepts it as it is.
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".candidate.selected")) == 1)
        assert len(driver.find_elements(By.CSS_SELECTOR, ".candidate")) == 3
        first = driver.execute_script("return [window.engine.task.id, window.engine.proposal.best]")
        driver.find_element(By.TAG_NAME, "body").send_keys(Keys.ENTER)
        wait.until(
            lambda d: d.execute_script("return window.engine.task && window.engine.task.id") not in (None, first[0])
        )

        # Task 2: fix the proposal by clicking two words (one in, one out, whatever they were), then submit.
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".candidate.selected")) == 1)
        second, best, proposed, n_words = driver.execute_script(
            "const e = window.engine; "
            "return [e.task.id, e.selected, e.proposal.candidates[e.selected].word_ids, e.page.words.length]"
        )
        scale = driver.execute_script("return window.engine.scale")
        boxes = driver.execute_script("return window.engine.page.words.map(w => w.box)")
        big = [
            i
            for i in range(n_words)
            if (boxes[i][2] - boxes[i][0]) * scale > 12 and (boxes[i][3] - boxes[i][1]) * scale > 6
        ]
        clicks = [big[0], big[len(big) // 2]]
        for i in clicks:
            _click_word(driver, i)
        assert driver.execute_script("return window.engine.edits") == 2
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(SCREENSHOT))
        driver.find_element(By.ID, "submit").click()
        wait.until(
            lambda d: d.execute_script("return window.engine.task && window.engine.task.id") not in (None, second)
        )

        # A reviewer approves the first annotation with the keyboard, then opens the dashboard.
        driver.find_element(By.ID, "logout").click()
        name = wait.until(EC.visibility_of_element_located((By.ID, "login-name")))
        name.clear()
        name.send_keys("rev")
        driver.find_element(By.ID, "login-password").send_keys(PASSWORD)
        driver.find_element(By.ID, "login-submit").click()
        wait.until(EC.element_to_be_clickable((By.ID, "nav-review"))).click()
        wait.until(
            lambda d: (d.execute_script("return window.engine.annotation && window.engine.annotation.id") or 0) > 0
        )
        reviewed = driver.execute_script("return window.engine.annotation.id")
        driver.find_element(By.TAG_NAME, "body").send_keys("a")
        wait.until(
            lambda d: d.execute_script("return window.engine.annotation && window.engine.annotation.id") != reviewed
        )
        driver.find_element(By.ID, "nav-dashboard").click()
        wait.until(
            lambda d: d.execute_script(
                "const i = document.getElementById('dash-plot'); return i.complete && i.naturalWidth > 0"
            )
        )
        assert "ann" in driver.find_element(By.ID, "dash-tables").text
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE" and "/api/me" not in e["message"]]
        assert errors == []
    finally:
        driver.quit()

    rows = {a["task_id"]: a for a in store.my_annotations(db, 1)}
    a1, a2 = rows[first[0]], rows[second]
    assert a1["candidate"] == first[1] and a1["edits"] == 0 and a1["model_version"] and a1["seconds"] > 0
    assert a1["outcome"] == "accepted" and a1["proposal_id"]  # the candidate's mask, as the server proposed it
    assert (a2["candidate"], a2["outcome"]) == (best, "edited") and a2["edits"] == 2 and a2["model_version"]
    assert set(a2["word_ids"]) == set(proposed) ^ set(clicks)  # exactly the two clicked words changed
    assert best is not None and SCREENSHOT.stat().st_size > 10_000
    assert store.get_annotation(db, reviewed)["review"] == "approved"
    assert db.integrity_problems() == []


def _marked(driver, index: int) -> bool:
    """Whether the page's mask covers the centre of word ``index``."""
    return driver.execute_script(
        "const b = window.engine.page.words[arguments[0]].box;"
        "const x = Math.round((b[0] + b[2]) / 2), y = Math.round((b[1] + b[3]) / 2);"
        "return document.getElementById('mask').getContext('2d').getImageData(x, y, 1, 1).data[3] > 0;",
        index,
    )


def test_clicks_send_the_answer_back_to_the_model(served, tiny_proposer):
    """The Model tool: a click and a right-click on words go to the model with the current mask, which answers
    again (new candidates, the best selected, holding the word clicked in and not the one clicked out); Ctrl+Z
    takes the last click back; the submitted answer counts both corrections as edits."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    from docjepa.apps.engine import store

    base, db = served
    calls = []
    refine = tiny_proposer.model.refine
    tiny_proposer.model.refine = lambda *a, **k: calls.append(k) or refine(*a, **k)
    driver = _browser()
    try:
        wait = WebDriverWait(driver, 30)
        driver.get(base + "/")
        _sign_in(driver, wait, "ann")
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".candidate.selected")) == 1)
        task = driver.execute_script("return window.engine.task.id")
        driver.find_element(By.TAG_NAME, "body").send_keys("k")
        assert driver.execute_script("return window.engine.tool") == "model"
        n = driver.execute_script("return window.engine.page.words.length")
        _click_word(driver, 0)
        wait.until(lambda d: d.execute_script("return window.engine.refines.length") == 1 and len(calls) == 1)
        wait.until(lambda d: "answered again" in d.find_element(By.ID, "status").text)
        assert _marked(driver, 0)  # the new answer holds the word clicked in
        _click_word(driver, n // 2, right=True)
        wait.until(lambda d: len(calls) == 2 and "answered again" in d.find_element(By.ID, "status").text)
        assert _marked(driver, 0) and not _marked(driver, n // 2)  # and not the word clicked out
        assert calls[0]["labels"] == [1] and calls[1]["labels"] == [1, 0] and calls[1]["mask"] is not None
        assert driver.execute_script("return window.engine.prompts.length") == 2
        ActionChains(driver).key_down(Keys.CONTROL).send_keys("z").key_up(Keys.CONTROL).perform()
        assert driver.execute_script("return window.engine.prompts.length") == 1
        assert len(driver.find_elements(By.CSS_SELECTOR, ".candidate")) == 3
        driver.find_element(By.ID, "submit").click()
        wait.until(lambda d: d.execute_script("return window.engine.task && window.engine.task.id") not in (None, task))
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE" and "/api/me" not in e["message"]]
        assert errors == []
    finally:
        driver.quit()
        tiny_proposer.model.refine = refine
    saved = {a["task_id"]: a for a in store.my_annotations(db, 1)}[task]
    # Ctrl+Z went back to the answer of the first click: saved as the model gave it, one click.
    assert saved["edits"] == 2 and saved["model_version"] and (saved["outcome"], saved["clicks"]) == ("refined", 1)


def _sign_in(driver, wait, name: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC

    field = wait.until(EC.visibility_of_element_located((By.ID, "login-name")))
    field.clear()
    field.send_keys(name)
    driver.find_element(By.ID, "login-password").send_keys(PASSWORD)
    driver.find_element(By.ID, "login-submit").click()
    wait.until(lambda d: d.execute_script("return !!(window.engine.user && window.engine.csrf)"))


def _held_by(db, name: str) -> list[int]:
    from docjepa.apps.engine import store
    from docjepa.apps.engine.tables import Task

    uid = next(u["id"] for u in store.list_users(db) if u["name"] == name)
    with db.read() as s:
        return [t.id for t in s.query(Task).filter(Task.lease_user_id == uid)]


@pytest.mark.slow  # end to end in a real browser, two accounts, a dozen tasks
def test_the_page_leases_skips_marks_and_shows_what_people_need(served):
    """Reviewers hold no lease; a word click edits a proposal exactly; N saves "not answerable"; → hands out
    another task; signing out gives the lease back; rejected work comes back with its reason; the page fills the
    view's width and zooms."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    from docjepa.apps.engine import store

    base, db = served
    users = {u["name"]: u for u in store.list_users(db)}
    rejected = store.claim_next(db, users["ann"]["id"])  # an earlier answer of ann's, rejected with a reason
    saved = store.create_annotation(
        db, rejected["id"], users["ann"]["id"], store.Answer(rejected["question"], False, None)
    )
    store.review_annotation(db, saved["id"], 1, users["rev"], "reject", "the total is on the next line")
    driver = _browser()
    try:
        wait = WebDriverWait(driver, 30)
        driver.get(base + "/")
        _sign_in(driver, wait, "rev")  # a reviewer starts in Review and claims nothing
        wait.until(lambda d: d.execute_script("return window.engine.mode") == "review")
        assert _held_by(db, "rev") == []
        driver.find_element(By.ID, "nav-annotate").click()
        wait.until(lambda d: d.execute_script("return window.engine.task && window.engine.task.id"))
        assert len(_held_by(db, "rev")) == 1
        driver.find_element(By.ID, "nav-review").click()  # leaving Annotate gives the task back
        wait.until(lambda d: _held_by(db, "rev") == [])
        driver.find_element(By.ID, "logout").click()

        _sign_in(driver, wait, "ann")
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".candidate.selected")) == 1)
        # The page fills the width of the view; + zooms in, 0 fits again.
        width, room, zoom = driver.execute_script(
            "return [document.getElementById('page-img').getBoundingClientRect().width,"
            " document.getElementById('stage-wrap').clientWidth - 32, window.engine.zoom]"
        )
        assert zoom == 1 and abs(width - room) <= 2
        body = driver.find_element(By.TAG_NAME, "body")
        scale = driver.execute_script("return window.engine.scale")
        body.send_keys("+")
        assert driver.execute_script("return window.engine.scale") == pytest.approx(scale * 1.25)
        body.send_keys("0")
        assert driver.execute_script("return window.engine.scale") == pytest.approx(scale)
        # Clicking out every word of a candidate leaves no pixel of it.
        k, ids = driver.execute_script(
            "const c = window.engine.proposal.candidates.filter(c => c.word_ids.length).sort("
            "(a, b) => a.word_ids.length - b.word_ids.length)[0]; return c ? [c.index, c.word_ids] : [null, []]"
        )
        assert k is not None, "no candidate covers a word"
        body.send_keys(str(k + 1))
        wait.until(lambda d: d.execute_script("return window.engine.selected") == k)
        wait.until(lambda d: not d.execute_script("return maskIsEmpty()"))
        for i in ids:
            _click_word(driver, i)
        assert driver.execute_script("return maskIsEmpty()")
        # N: saved as not answerable, with no candidate counted as accepted.
        body.send_keys("1")
        wait.until(lambda d: d.execute_script("return window.engine.selected") == 0)
        first = driver.execute_script("return window.engine.task.id")
        body.send_keys("n")
        wait.until(
            lambda d: d.execute_script("return window.engine.task && window.engine.task.id") not in (None, first)
        )
        mine = {a["task_id"]: a for a in store.my_annotations(db, users["ann"]["id"])}
        assert mine[first]["answerable"] is False and mine[first]["candidate"] is None
        # → skips: each time another task, never the one passed over.
        seen = [driver.execute_script("return window.engine.task.id")]
        for _ in range(2):
            body.send_keys(Keys.ARROW_RIGHT)
            wait.until(
                lambda d, last=seen[-1]: (
                    d.execute_script("return window.engine.task && window.engine.task.id") not in (None, last)
                )
            )
            seen.append(driver.execute_script("return window.engine.task.id"))
        assert len(set(seen)) == 3 and _held_by(db, "ann") == [seen[-1]]
        # J: the rejected annotation, with the reviewer's reason on the page.
        wait.until(lambda d: d.find_element(By.ID, "rejected").text == "Rejected (1)")
        body.send_keys("j")
        wait.until(lambda d: "the total is on the next line" in d.find_element(By.ID, "task-info").text)
        assert driver.execute_script("return window.engine.annotation.id") == saved["id"]
        driver.find_element(By.ID, "logout").click()  # signing out gives every lease back
        wait.until(lambda d: _held_by(db, "ann") == [])
        expected = ("/api/me", "/api/review/next - Failed to load resource: the server responded with a status of 404")
        errors = [
            e
            for e in driver.get_log("browser")
            if e["level"] == "SEVERE" and not any(x in e["message"] for x in expected)
        ]
        assert errors == []  # nothing but "sign in first" and "nothing to review"
    finally:
        driver.quit()
