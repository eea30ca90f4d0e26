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


def _click_word(driver, index: int) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    layer = driver.find_element(By.ID, "pointer-layer")
    x0, y0, x1, y1 = driver.execute_script(f"return window.engine.page.words[{index}].box")
    scale = driver.execute_script("return window.engine.scale")
    size = layer.size  # offsets are from the element's centre
    dx, dy = (x0 + x1) / 2 * scale - size["width"] / 2, (y0 + y1) / 2 * scale - size["height"] / 2
    ActionChains(driver).move_to_element_with_offset(layer, int(dx), int(dy)).click().perform()


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
    assert a2["candidate"] is None and a2["edits"] == 2 and a2["model_version"]
    assert set(a2["word_ids"]) == set(proposed) ^ set(clicks)  # exactly the two clicked words changed
    assert best is not None and SCREENSHOT.stat().st_size > 10_000
    assert store.get_annotation(db, reviewed)["review"] == "approved"
    assert db.integrity_problems() == []
