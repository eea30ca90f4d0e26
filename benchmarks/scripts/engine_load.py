"""A team's working day on one server: simulated annotators claim a task, ask the model for its proposal, look at
it for a person's time and save its best candidate, all at once, against a server run as ``docjepa engine serve``
runs it (uvicorn, one process, the model in its worker thread).

    python benchmarks/scripts/engine_load.py --data runs/load/pages --annotators 20 50 --pace 5 10 \
        --seconds 60 --out benchmarks/results/docjepa/engine/load.json

Each scenario (annotators × {a person's pace, flat out}) gets a fresh database of the data's pages and questions
(SQLite, or PostgreSQL with ``--postgres URL`` of an empty cluster database per scenario created here) and a fresh
server. Recorded: proposal and save latency (median, p90, p95), saves per second, 503 answers (the model's queue
full; the client waits ``Retry-After`` and asks again), any other 5xx, saves acknowledged but missing from the
database (lost), tasks handed to two people at once (double leases), and the database's integrity check.
``python benchmarks/scripts/engine_load.py report RESULTS --markdown docs/engine.md`` writes the table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import numpy as np
from engine import free_port, report_command  # this folder's engine.py: one annotator's latencies

PASSWORD = "load benchmark password"
START, END = "<!-- engine-load:start -->", "<!-- engine-load:end -->"


def call(base: str, method: str, path: str, body=None, token: str | None = None) -> tuple[int, dict, dict]:
    """(status, JSON body, headers) of one request; HTTP errors are answers, not exceptions."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, json.loads(r.read() or b"{}"), dict(r.headers)
    except urllib.error.HTTPError as err:
        raw = err.read()
        try:
            out = json.loads(raw)
        except ValueError:
            out = {"detail": raw[:200].decode(errors="replace")}
        return err.code, out, dict(err.headers)


def percentiles(xs: list[float]) -> dict | None:
    if not xs:
        return None
    a = np.array(xs) * 1000
    return {
        "n": len(xs),
        "median_ms": float(np.median(a)),
        "p90_ms": float(np.percentile(a, 90)),
        "p95_ms": float(np.percentile(a, 95)),
        "max_ms": float(a.max()),
    }


class Record:
    """What the annotators saw, shared by their threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.propose: list[float] = []
        self.save: list[float] = []
        self.statuses: Counter = Counter()
        self.claims: list[int] = []
        self.saved: list[int] = []
        self.new_page: list[bool] = []
        self.busy = 0

    def count(self, key: str) -> None:
        with self.lock:
            self.statuses[key] += 1

    def add(self, **kw) -> None:
        with self.lock:
            for k, v in kw.items():
                getattr(self, k).append(v)


def annotator(base: str, name: str, pace: tuple[float, float] | None, until: float, rec: Record, seed: int) -> None:
    """One person: sign in (everyone at the same moment), then claim → propose (again after Retry-After while the
    model is busy) → look for a person's time (``pace``; None: flat out) → save the best candidate. At a person's
    pace the first claim comes after a random part of one look, as a team already at work spreads out."""
    rng = random.Random(seed)
    status, out, _ = call(base, "POST", "/api/login", {"name": name, "password": PASSWORD})
    rec.count(f"login {status}")
    token = out.get("token")
    if pace is not None:  # people at their own pace did not all claim their first task in the same second
        time.sleep(rng.uniform(0, pace[1]))
    while token and time.monotonic() < until:
        status, task, _ = call(base, "POST", "/api/tasks/next", {}, token)
        if status != 200:
            rec.count(f"next {status}")
            return
        rec.add(claims=task["id"])
        image = urllib.request.Request(f"{base}/api/pages/{task['page_id']}/image", method="GET")
        image.add_header("Authorization", f"Bearer {token}")
        with urllib.request.urlopen(image, timeout=300) as r:  # the page shows the image before it proposes
            r.read()
        t0 = time.perf_counter()
        while True:
            status, prop, headers = call(
                base, "POST", f"/api/tasks/{task['id']}/propose", {"question": task["question"]}, token
            )
            rec.count(f"propose {status}")
            if status != 503:
                break
            with rec.lock:
                rec.busy += 1
            time.sleep(float(headers.get("Retry-After", "1")))
        rec.add(propose=time.perf_counter() - t0, new_page=status == 200 and prop["encode_seconds"] > 0)
        if status != 200:
            continue
        if pace is not None:
            time.sleep(rng.uniform(*pace))
        best = prop["candidates"][prop["best"]]
        body = {"question": task["question"], "proposal_id": prop["proposal_id"], "candidate": best["index"]}
        body |= {"mask_png": best["png"]} if not best["empty"] else {"answerable": False}
        t0 = time.perf_counter()
        status, saved, _ = call(base, "POST", f"/api/tasks/{task['id']}/annotation", body, token)
        rec.count(f"save {status}")
        if status == 200:
            rec.add(save=time.perf_counter() - t0, saved=saved["id"])


def prepare(url: str, data: Path, pages: int, people: int) -> dict:
    from docjepa.apps.engine import store
    from docjepa.apps.engine.db import Database
    from docjepa.data.importer import iter_pages

    db = Database(url)
    db.migrate()
    store.add_pages(db, list(iter_pages([data], 150, "eng", pages, False)))
    for i in range(people):
        store.add_user(db, f"a{i:02d}", "annotator", PASSWORD)
    counts = store.counts(db)
    db.dispose()
    return counts


def check(url: str, rec: Record) -> dict:
    from sqlalchemy import func, select

    from docjepa.apps.engine.db import Database
    from docjepa.apps.engine.tables import Annotation

    db = Database(url)
    with db.read() as s:
        stored = set(s.scalars(select(Annotation.id)))
        per_task = s.execute(select(Annotation.task_id, func.count()).group_by(Annotation.task_id)).all()
    out = {
        "lost_saves": len(set(rec.saved) - stored),
        "double_leases": len(rec.claims) - len(set(rec.claims)),
        "tasks_annotated_twice": sum(1 for _, n in per_task if n > 1),
        "integrity_problems": db.integrity_problems(),
    }
    db.dispose()
    return out


def scenario(args, url: str, people: int, pace: tuple[float, float] | None) -> dict:
    counts = prepare(url, args.data, args.pages, people)
    port, media = free_port(), tempfile.mkdtemp(prefix="engine-load-")
    base = f"http://127.0.0.1:{port}"
    cmd = [
        str(Path(sys.executable).with_name("docjepa")),
        "engine",
        "serve",
        "--db",
        url,
        "--checkpoint",
        args.checkpoint,
    ]
    cmd += ["--port", str(port), "--media", media, "--log-level", "warning"]
    cmd += ["--workers", str(args.workers)] if args.workers else []
    cmd += ["--model-threads", str(args.model_threads)] if args.model_threads else []
    server = subprocess.Popen(cmd)
    try:
        for _ in range(1200):
            try:
                urllib.request.urlopen(base + "/", timeout=1).read()
                break
            except OSError:
                time.sleep(0.1)
        rec = Record()
        until = time.monotonic() + args.seconds
        threads = [
            threading.Thread(target=annotator, args=(base, f"a{i:02d}", pace, until, rec, args.seed + i))
            for i in range(people)
        ]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
    finally:
        server.terminate()  # uvicorn stops its worker processes too
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    errors = {k: v for k, v in rec.statuses.items() if k.split()[-1].startswith("5") and not k.endswith(" 503")}
    return {
        "annotators": people,
        "pace_s": list(pace) if pace else None,
        "seconds": args.seconds,
        "wall_s": wall,
        "data": counts,
        "proposal": percentiles(rec.propose),
        "proposal_new_page": percentiles([t for t, new in zip(rec.propose, rec.new_page) if new]),
        "proposal_same_page": percentiles([t for t, new in zip(rec.propose, rec.new_page) if not new]),
        "save": percentiles(rec.save),
        "saves": len(rec.saved),
        "saves_per_s": len(rec.saved) / wall,
        "busy_503": rec.busy,
        "server_errors_5xx": sum(errors.values()),
        "statuses": dict(rec.statuses),
        **check(url, rec),
    }


def new_database(args, people: int, pace) -> str:
    if not args.postgres:
        return f"sqlite:///{tempfile.mkdtemp(prefix='engine-load-db-')}/engine.db"
    import psycopg

    name = f"load_{people}_{'pace' if pace else 'flat'}_{os.getpid()}_{int(time.time())}"
    with psycopg.connect(args.postgres.replace("postgresql+psycopg", "postgresql") + "/postgres", autocommit=True) as c:
        c.execute(f"CREATE DATABASE {name}")
    return f"{args.postgres}/{name}"


def report(paths: list[Path], markdown: list[Path]) -> str:
    """The table of the results at ``paths``, written between the markers of each ``markdown`` file."""
    text = table(paths, markdown)
    from docsections import fill_section

    for md in markdown:
        fill_section(md, START, END, text)
    return text


def table(paths: list[Path], markdown: list[Path], root: Path = Path(".")) -> str:
    """A markdown table of the results at ``paths`` (relative to ``root``), headed by the command that makes it."""
    cmd = "python benchmarks/scripts/engine_load.py report " + " ".join(str(p) for p in paths)
    cmd += "".join(f" --markdown {m}" for m in markdown)
    lines = [
        f"Generated by `{cmd}`; server, model, database and simulated annotators on the same machine.",
        "",
        "| code | database | annotators | pace | proposal median / p95 ms | saves / s | save p95 ms "
        "| 503s | other 5xx | lost | double leases |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for path in paths:
        r = json.loads((root / path).read_text())
        for s in r["scenarios"]:
            pace = f"{s['pace_s'][0]:g}–{s['pace_s'][1]:g} s" if s["pace_s"] else "flat out"
            p, v = s["proposal"], s["save"]
            lines.append(
                f"| {r['label']} | {r['database']} | {s['annotators']} | {pace} | "
                f"{p['median_ms']:.0f} / {p['p95_ms']:.0f} | {s['saves_per_s']:.1f} | {v['p95_ms']:.0f} | "
                f"{s['busy_503']} | {s['server_errors_5xx']} | {s['lost_saves']} | {s['double_leases']} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if report_command(argv, "engine_load.py", report):
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", default=None, help="model folder (default: the shipped model)")
    ap.add_argument("--data", type=Path, required=True, help="shard folder whose pages and questions become tasks")
    ap.add_argument("--pages", type=int, default=400)
    ap.add_argument("--annotators", type=int, nargs="+", default=[20, 50])
    ap.add_argument("--pace", type=float, nargs=2, default=[5.0, 10.0], help="a person's seconds per mask (range)")
    ap.add_argument("--modes", nargs="+", choices=["pace", "flat"], default=["pace", "flat"])
    ap.add_argument("--seconds", type=float, default=60.0, help="length of each scenario")
    ap.add_argument("--postgres", default=None, help="postgresql+psycopg://USER@HOST:PORT of a cluster to use")
    ap.add_argument("--workers", type=int, default=None, help="server processes (default: serve's own default)")
    ap.add_argument("--model-threads", type=int, default=None, help="model threads per worker (default: serve's)")
    ap.add_argument("--label", default="this", help="what code ran (a name for the table)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/docjepa/engine/load.json"))
    args = ap.parse_args(argv)
    if args.checkpoint is None:
        from docjepa.modeling.shipped import shipped_dir

        args.checkpoint = str(shipped_dir())
    result = {
        "label": args.label,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "database": "postgresql" if args.postgres else "sqlite",
        "checkpoint": Path(args.checkpoint).name,
        "workers": args.workers or "serve's default",
        "command": "python benchmarks/scripts/engine_load.py " + " ".join(argv),
        "scenarios": [],
    }
    for mode in args.modes:
        for people in args.annotators:
            pace = tuple(args.pace) if mode == "pace" else None
            s = scenario(args, new_database(args, people, pace), people, pace)
            result["scenarios"].append(s)
            print(json.dumps({k: s[k] for k in ("annotators", "pace_s", "proposal", "saves_per_s", "busy_503")}))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
