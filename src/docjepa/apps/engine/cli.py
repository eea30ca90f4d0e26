"""``docjepa engine …``: create the database and register pages, manage accounts, serve, export, report, the
automatic stages, retraining rounds and the simulation. This module declares the options; :mod:`.commands` does
the work."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .commands import (
    cmd_autolabel,
    cmd_check,
    cmd_curve,
    cmd_export,
    cmd_init,
    cmd_propose_questions,
    cmd_retrain,
    cmd_rounds,
    cmd_serve,
    cmd_simulate,
    cmd_stats,
    cmd_user_add,
    cmd_user_change,
    cmd_user_list,
)
from .db import default_url
from .tables import ROLES

DEFAULT_DB = default_url()


def add_parser(sub, int_at_least) -> None:
    """Add ``engine`` and its subcommands to the ``docjepa`` parser."""
    e = sub.add_parser("engine", help="the data engine: an annotation service where the model proposes masks")
    esub = e.add_subparsers(dest="engine_command", required=True)
    _add_init(esub, int_at_least)
    _add_user(esub)
    _add_serve(esub, int_at_least)
    _add_export(esub)
    _add_stats(esub)
    _add_propose_questions(esub, int_at_least)
    _add_simulate(esub, int_at_least)
    _add_curve(esub)
    _add_check(esub)


def with_db(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``p`` with the ``--db`` option."""
    p.add_argument("--db", default=DEFAULT_DB, help=f"database URL (default {DEFAULT_DB}; or postgresql+psycopg://…)")
    return p


def _add_init(esub: Any, int_at_least: Any) -> None:
    i = with_db(esub.add_parser("init", help="create or upgrade the database; register pages"))
    i.add_argument(
        "--data",
        type=Path,
        nargs="*",
        default=[],
        help="shard folders (their questions become tasks), PDFs, images or folders of them",
    )
    i.add_argument("--checkpoint", help="fine-tuned model that `serve` uses when given none (`shipped`: the package's)")
    i.add_argument("--limit", type=int_at_least(1), default=None, help="register at most this many pages")
    i.add_argument("--no-questions", action="store_true", help="ignore the shards' questions: annotators write them")
    i.add_argument("--dpi", type=int_at_least(36, 600), default=150)
    i.add_argument("--lang", default="eng", help="Tesseract language of image OCR")
    i.add_argument("--no-progress", action="store_true")
    i.set_defaults(func=cmd_init)


def _add_user(esub: Any) -> None:
    u = esub.add_parser("user", help="accounts")
    usub = u.add_subparsers(dest="user_command", required=True)
    ua = with_db(usub.add_parser("add", help="add an account (password asked, or read from stdin / --password-env)"))
    ua.add_argument("name")
    ua.add_argument("--role", choices=ROLES, required=True)
    ua.add_argument("--password-env", help="read the password from this environment variable")
    ua.set_defaults(func=cmd_user_add)
    ul = with_db(usub.add_parser("list", help="list accounts"))
    ul.set_defaults(func=cmd_user_list)
    up = with_db(usub.add_parser("passwd", help="set a new password (every session of the account ends)"))
    up.add_argument("name")
    up.add_argument("--password-env", help="read the password from this environment variable")
    up.set_defaults(func=cmd_user_change, change="passwd")
    ur = with_db(usub.add_parser("role", help="change an account's role"))
    ur.add_argument("name")
    ur.add_argument("role", choices=ROLES)
    ur.set_defaults(func=cmd_user_change, change="role")
    for verb, what in (("disable", "sign-in refused, sessions ended, held tasks given back"), ("enable", "again")):
        p = with_db(usub.add_parser(verb, help=f"{verb} an account ({what})"))
        p.add_argument("name")
        p.set_defaults(func=cmd_user_change, change=verb)


def _add_serve(esub: Any, int_at_least: Any) -> None:
    s = with_db(esub.add_parser("serve", help="the annotation web service (FastAPI + uvicorn)"))
    s.add_argument(
        "--checkpoint",
        help="fine-tuned model proposing masks, `shipped` for the package's (default: the one given to init)",
    )
    s.add_argument("--no-model", action="store_true", help="serve without proposals")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int_at_least(1, 65535), default=8000)
    s.add_argument("--media", type=Path, default=Path("runs/engine/media"), help="folder of uploaded files")
    s.add_argument("--lease-minutes", type=float, default=15.0, help="how long a task stays with its annotator")
    s.add_argument("--max-upload-mb", type=int_at_least(1, 4096), default=64)
    s.add_argument(
        "--secure-cookie",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="mark the session cookie Secure, sent over HTTPS only (default: on unless --host is a loopback address)",
    )
    s.add_argument(
        "--forwarded-allow-ips",
        default="",
        help="proxies (comma-separated IPs, or *) whose X-Forwarded-For / X-Forwarded-Proto are believed; default: "
        "none, every client is the address it connects from",
    )
    s.add_argument("--device", default=None, help="model device (default: CUDA when available)")
    s.add_argument(
        "--workers",
        type=int_at_least(1),
        default=None,
        help="server processes, each with its own model and cores (default: 2 on a machine of 2 cores or more when "
        "a model is served, else 1)",
    )
    s.add_argument(
        "--model-threads", type=int_at_least(1), default=None, help="model threads per worker (default: cores − 1)"
    )
    s.add_argument(
        "--model-queue", type=int_at_least(1), default=32, help="requests that may wait for the model (more: 503)"
    )
    s.add_argument(
        "--model-batch", type=int_at_least(1), default=8, help="waiting requests the model answers in one turn"
    )
    s.add_argument("--sign-in-free-attempts", type=int_at_least(1), default=5, help="failures per account before waits")
    s.add_argument(
        "--sign-in-free-per-address", type=int_at_least(1), default=20, help="failures per client address before waits"
    )
    s.add_argument("--sign-in-base-delay", type=float, default=1.0, help="first wait (s); doubles with each failure")
    s.add_argument("--sign-in-max-delay", type=float, default=900.0, help="longest wait between attempts (s)")
    s.add_argument(
        "--allowed-origin",
        action="append",
        default=[],
        help="another origin whose pages may change state (https://host, behind a proxy; repeat)",
    )
    s.add_argument("--api-docs", action="store_true", help="serve /api/openapi.json to signed-in users")
    s.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    s.set_defaults(func=cmd_serve)


def _add_export(esub: Any) -> None:
    x = with_db(esub.add_parser("export", help="annotations as COCO, JSON lines or fine-tuning shards"))
    x.add_argument("--format", choices=["coco", "shards", "jsonl"], required=True)
    x.add_argument("--out", type=Path, required=True)
    x.add_argument("--reviews", default="pending,approved", help="review states to export (default: all but rejected)")
    x.add_argument("--val-fraction", type=float, default=0.2, help="shards: fraction of documents for validation")
    x.set_defaults(func=cmd_export)


def _add_stats(esub: Any) -> None:
    st = with_db(esub.add_parser("stats", help="dashboard figures: stats.json and stats.png"))
    st.add_argument("--out", type=Path, default=Path("runs/engine/stats"))
    st.set_defaults(func=cmd_stats)


def _add_propose_questions(esub: Any, int_at_least: Any) -> None:
    pq = with_db(esub.add_parser("propose-questions", help="semi-automatic: the engine asks each page's questions"))
    pq.add_argument("--checkpoint", help="model (default: the serving one)")
    pq.add_argument("--bank-min-score", type=float, default=0.5, help="keep a bank question at this predicted IoU")
    pq.add_argument("--no-progress", action="store_true")
    pq.set_defaults(func=cmd_propose_questions)
    al = with_db(esub.add_parser("autolabel", help="automatic labels that pass thresholds chosen on people's"))
    al.add_argument("--checkpoint", help="model (default: the serving one)")
    al.add_argument("--agree", type=float, default=0.8, help="IoU with people's answer that counts as agreeing")
    al.add_argument("--target", type=float, default=0.9, help="fraction of kept labels that must agree")
    al.add_argument("--limit", type=int_at_least(1), default=None, help="label at most this many questions")
    al.add_argument("--no-progress", action="store_true")
    al.set_defaults(func=cmd_autolabel)
    rt = with_db(esub.add_parser("retrain", help="a retraining round: export, fine-tune, evaluate, promote if better"))
    rt.add_argument("--out", type=Path, required=True, help="the round's folder (data/, model/)")
    rt.add_argument("--steps", type=int_at_least(1), default=200)
    rt.add_argument("--include-machine", action="store_true", help="train on automatic labels too")
    rt.add_argument("--val-fraction", type=float, default=0.2)
    rt.add_argument("--min-gain", type=float, default=0.0, help="promote only when held-out mIoU gains more")
    rt.add_argument(
        "--config", default=None, help="fine-tuning config: a YAML file or a packaged config (default finetune/tiny)"
    )
    rt.add_argument("--threads", type=int_at_least(1), default=None)
    rt.set_defaults(func=cmd_retrain)
    rr = with_db(esub.add_parser("rounds", help="the retraining rounds so far"))
    rr.set_defaults(func=cmd_rounds)


def _add_simulate(esub: Any, int_at_least: Any) -> None:
    sm = esub.add_parser("simulate", help="the engine curve with a scripted annotator on generated pages")
    sm.add_argument("--init", default="runs/demo/pretrain", help="pre-training run the seed model starts from")
    sm.add_argument("--out", type=Path, default=Path("runs/engine-simulate"))
    sm.add_argument("--pool-pages", type=int_at_least(1), default=300)
    sm.add_argument("--eval-pages", type=int_at_least(1), default=120)
    sm.add_argument("--seed-pages", type=int_at_least(1), default=50)
    sm.add_argument("--rounds", type=int_at_least(1), default=5)
    sm.add_argument("--pages-per-round", type=int_at_least(1), default=25)
    sm.add_argument("--steps", type=int_at_least(1), default=60, help="fine-tuning steps per round")
    sm.add_argument("--seed-steps", type=int_at_least(1), default=150)
    sm.add_argument("--sample-pages", type=int_at_least(1), default=75, help="pages the semi-automatic stage scores")
    sm.add_argument("--eval-limit", type=int_at_least(1), default=200)
    sm.add_argument("--page-size", type=int_at_least(64), default=512)
    sm.add_argument("--threads", type=int_at_least(1), default=2)
    sm.add_argument("--seed", type=int, default=0)
    sm.add_argument("--no-progress", action="store_true")
    sm.set_defaults(func=cmd_simulate)


def _add_curve(esub: Any) -> None:
    cv = esub.add_parser("curve", help="the simulation's JSON → its table (into marked doc sections) and plot")
    cv.add_argument("result", type=Path, help="simulate.json")
    cv.add_argument("--markdown", action="append", type=Path, default=[], help="fill this file's curve section")
    cv.add_argument("--plot", type=Path, default=None, help="write the curve here")
    cv.set_defaults(func=cmd_curve)


def _add_check(esub: Any) -> None:
    c = with_db(esub.add_parser("check", help="integrity check of the database (exit 1 when a problem is found)"))
    c.set_defaults(func=cmd_check)
