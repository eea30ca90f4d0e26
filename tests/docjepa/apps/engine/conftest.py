"""Fixtures of the data engine's tests: databases (SQLite, and a throwaway PostgreSQL cluster when Debian's
binaries are installed), a tiny model checkpoint, signed-in clients."""

import base64
import io
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("sqlalchemy")

PG_BIN = [Path("/usr/lib/postgresql") / v / "bin" for v in ("17", "16", "15", "14")]


def _pg_bin() -> Path | None:
    for d in PG_BIN:
        if (d / "initdb").is_file() and (d / "pg_ctl").is_file():
            return d
    found = shutil.which("initdb")
    return Path(found).parent if found and shutil.which("pg_ctl") else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def pg_cluster():
    """A PostgreSQL cluster in a temp folder, on a loopback port and a socket there; removed afterwards. Skipped
    with the reason when the binaries (Debian: postgresql) are missing."""
    pytest.importorskip("psycopg")
    bin_dir = _pg_bin()
    if bin_dir is None:
        pytest.skip("PostgreSQL binaries not found (Debian: apt-get install postgresql; make setup tries)")
    prefix: list[str] = []
    root = Path(tempfile.mkdtemp(prefix="docjepa-pg-"))
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root: run it as the postgres account
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and there is no postgres account to run PostgreSQL as")
        shutil.chown(root, "postgres")
        prefix = ["runuser", "-u", "postgres", "--"]
    data, port = root / "data", _free_port()
    run = lambda *cmd: subprocess.run([*prefix, *cmd], check=True, capture_output=True, text=True)  # noqa: E731
    try:
        run(str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "--no-sync")
        opts = f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={root} -c fsync=off"
        run(str(bin_dir / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(root / "log"), "-w", "start")
    except subprocess.CalledProcessError as err:
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(f"PostgreSQL did not start: {err.stderr.strip()[-300:]}")
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}"
    finally:
        subprocess.run(
            [*prefix, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"], capture_output=True
        )
        shutil.rmtree(root, ignore_errors=True)


def new_pg_database(cluster: str) -> str:
    import psycopg

    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(cluster.replace("postgresql+psycopg", "postgresql") + "/postgres", autocommit=True) as c:
        c.execute(f"CREATE DATABASE {name}")
    return f"{cluster}/{name}"


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    """A fresh empty database of each kind."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'engine.db'}"
    return new_pg_database(request.getfixturevalue("pg_cluster"))


@pytest.fixture(scope="session")
def tiny_proposer(tiny_model):
    from docjepa.apps.engine.proposer import Proposer

    p = Proposer(tiny_model, device="cpu", threads=1)
    yield p
    p.close()


PASSWORD = "correct horse battery"


def make_engine(db_url: str, docs: Path, pages: int = 6, users=("ann", "bob", "rev", "boss")):
    """A migrated database holding ``pages`` of the ``docs`` fixture (their questions as tasks) and users
    ann, bob (annotators), rev (reviewer), boss (admin)."""
    from docjepa.apps.engine import store
    from docjepa.apps.engine.db import Database
    from docjepa.data.shards import DocumentDataset

    db = Database(db_url)
    db.migrate()
    ds = DocumentDataset(docs / "d")
    store.add_pages(db, [ds[i] for i in range(pages)])
    roles = {"ann": "annotator", "bob": "annotator", "rev": "reviewer", "boss": "admin"}
    for name in users:
        store.add_user(db, name, roles[name], PASSWORD)
    return db


def client_for(app, name: str):
    from fastapi.testclient import TestClient

    c = TestClient(app)
    r = c.post("/api/login", json={"name": name, "password": PASSWORD})
    assert r.status_code == 200, r.text
    c.headers["X-CSRF-Token"] = r.json()["csrf_token"]  # as the page sends it with every change
    return c


def mask_png(mask: np.ndarray) -> str:
    """A mask as the browser sends it: an RGBA PNG data URL, painted where the mask is."""
    from PIL import Image

    rgba = np.zeros((*mask.shape, 4), dtype=np.uint8)
    rgba[mask] = (230, 40, 40, 255)
    buf = io.BytesIO()
    Image.fromarray(rgba, "RGBA").save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def word_mask(page: dict, ids: list[int]) -> np.ndarray:
    """The mask of some words' boxes on a page (as the page's word clicks paint them)."""
    m = np.zeros((page["height"], page["width"]), dtype=bool)
    for i in ids:
        x0, y0, x1, y1 = (round(v) for v in page["words"][i]["box"])
        m[y0:y1, x0:x1] = True
    return m
