"""``docjepa engine …``: create the database and register pages, manage accounts, serve, export, report."""

from __future__ import annotations

import getpass
import json
import os
import sys
from pathlib import Path

from ...errors import UsageError
from .db import ROLES, Database, Setting, default_url

DEFAULT_DB = default_url()


def _db(args, migrate: bool = False) -> Database:
    db = Database(args.db)
    if migrate:
        db.migrate()
    else:
        db.require_schema()
    return db


def cmd_init(args) -> None:
    from . import store

    db = _db(args, migrate=True)
    result = {"db": args.db, "schema": db.revision()}
    if args.checkpoint:
        from ...modeling.files import SEGMENTATION, require_model

        require_model(args.checkpoint, (SEGMENTATION,), "proposing masks")
        with db.write() as s:
            s.merge(Setting(key="checkpoint", value=str(Path(args.checkpoint).resolve())))
        result["checkpoint"] = str(Path(args.checkpoint).resolve())
    totals = {"pages_added": 0, "pages_already_there": 0, "tasks_added": 0}
    from ...data.importer import iter_pages

    for page in iter_pages(args.data, args.dpi, args.lang, args.limit, not args.no_progress):
        for k, v in store.add_pages(db, [page], with_questions=not args.no_questions).items():
            totals[k] += v
    print(json.dumps(result | totals | {"totals": store.counts(db)}, indent=1))


def _password(args) -> str:
    if args.password_env:
        value = os.environ.get(args.password_env)
        if not value:
            raise UsageError(f"environment variable {args.password_env} is empty or unset")
        return value
    if sys.stdin.isatty():
        first = getpass.getpass(f"password for {args.name}: ")
        if first != getpass.getpass("again: "):
            raise UsageError("the two passwords differ")
        return first
    return sys.stdin.readline().rstrip("\n")


def cmd_user_add(args) -> None:
    from . import store

    db = _db(args)
    try:
        uid = store.add_user(db, args.name, args.role, _password(args))
    except store.Invalid as err:
        raise UsageError(str(err)) from None
    print(json.dumps({"id": uid, "name": args.name, "role": args.role}))


def cmd_user_list(args) -> None:
    from . import store

    print(json.dumps(store.list_users(_db(args)), indent=1))


def cmd_serve(args) -> None:
    import uvicorn

    from .server import ServerConfig, create_app

    db = _db(args)
    checkpoint = args.checkpoint
    if checkpoint is None and not args.no_model:
        with db.read() as s:
            row = s.get(Setting, "checkpoint")
            checkpoint = row.value if row is not None else None
        if checkpoint is None:
            raise UsageError("give --checkpoint RUN (or --no-model to annotate without proposals)")
    cfg = ServerConfig(
        db=args.db,
        checkpoint=None if args.no_model else checkpoint,
        media=str(args.media),
        lease_seconds=args.lease_minutes * 60,
        max_upload_bytes=args.max_upload_mb * 2**20,
        secure_cookie=args.secure_cookie,
        device=args.device,
        model_threads=args.model_threads,
    )
    app = create_app(cfg)
    model = app.state.proposer.version if app.state.proposer else "none"
    print(f"annotate at http://{args.host}:{args.port}/  (model: {model})", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, workers=1)


def cmd_export(args) -> None:
    from .export import export

    reviews = tuple(r.strip() for r in args.reviews.split(",") if r.strip())
    bad = [r for r in reviews if r not in ("pending", "approved", "rejected")]
    if bad or not reviews:
        raise UsageError(f"--reviews takes pending, approved, rejected (comma-separated), not {args.reviews!r}")
    print(json.dumps(export(_db(args), args.format, args.out, reviews, args.val_fraction), indent=1))


def cmd_stats(args) -> None:
    from .stats import write

    print(json.dumps(write(_db(args), args.out), indent=1))


def cmd_check(args) -> None:
    problems = _db(args).integrity_problems()
    print(json.dumps({"db": args.db, "problems": problems}, indent=1))
    if problems:
        raise SystemExit(1)


def cmd_propose_questions(args) -> None:
    from .automation import propose_questions
    from .retrain import serving_checkpoint

    db = _db(args)
    print(
        json.dumps(
            propose_questions(db, args.checkpoint or serving_checkpoint(db), args.bank_min_score, not args.no_progress),
            indent=1,
        )
    )


def cmd_autolabel(args) -> None:
    from .automation import autolabel
    from .retrain import serving_checkpoint

    db = _db(args)
    print(
        json.dumps(
            autolabel(
                db, args.checkpoint or serving_checkpoint(db), args.agree, args.target, args.limit, not args.no_progress
            ),
            indent=1,
        )
    )


def cmd_retrain(args) -> None:
    from .retrain import DEFAULT_CONFIG, retrain

    config = args.config or DEFAULT_CONFIG
    print(
        json.dumps(
            retrain(
                _db(args),
                args.out,
                args.steps,
                args.include_machine,
                args.val_fraction,
                args.min_gain,
                config,
                args.threads,
            ),
            indent=1,
        )
    )


def cmd_rounds(args) -> None:
    from .retrain import list_rounds

    print(json.dumps(list_rounds(_db(args)), indent=1))


def cmd_curve(args) -> None:
    from .simulate import write_report

    print(write_report(args.result, args.markdown, args.plot))


def cmd_simulate(args) -> None:
    import logging

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from .simulate import SimConfig, simulate

    init = Path(args.init)
    if not init.exists():
        raise UsageError(f"no model at --init {init} (a pre-training run, e.g. runs/demo/pretrain after make demo)")
    cfg = SimConfig(
        init=str(init),
        pool_pages=args.pool_pages,
        eval_pages=args.eval_pages,
        seed_pages=args.seed_pages,
        rounds=args.rounds,
        pages_per_round=args.pages_per_round,
        steps=args.steps,
        seed_steps=args.seed_steps,
        sample_pages=args.sample_pages,
        eval_limit=args.eval_limit,
        page_size=args.page_size,
        threads=args.threads,
        seed=args.seed,
    )
    result = simulate(cfg, args.out, progress=not args.no_progress)
    last = {m: r[-1]["heldout"]["mIoU"] for m, r in result["stages"].items()}
    print(
        json.dumps(
            {
                "out": str(args.out),
                "seed_mIoU": result["seed"]["mIoU"],
                "last_round_mIoU": last,
                "manual": {k: result["manual"][k]["heldout"]["mIoU"] for k in ("same_edits", "same_pages")},
            },
            indent=1,
        )
    )


def add_parser(sub, int_at_least) -> None:
    """Add ``engine`` and its subcommands to the ``docjepa`` parser."""
    e = sub.add_parser("engine", help="the data engine: an annotation service where the model proposes masks")
    esub = e.add_subparsers(dest="engine_command", required=True)

    def with_db(p):
        p.add_argument(
            "--db", default=DEFAULT_DB, help=f"database URL (default {DEFAULT_DB}; or postgresql+psycopg://…)"
        )
        return p

    i = with_db(esub.add_parser("init", help="create or upgrade the database; register pages"))
    i.add_argument(
        "--data",
        type=Path,
        nargs="*",
        default=[],
        help="shard folders (their questions become tasks), PDFs, images or folders of them",
    )
    i.add_argument("--checkpoint", help="fine-tuned model that `serve` uses when given none")
    i.add_argument("--limit", type=int_at_least(1), default=None, help="register at most this many pages")
    i.add_argument("--no-questions", action="store_true", help="ignore the shards' questions: annotators write them")
    i.add_argument("--dpi", type=int_at_least(36, 600), default=150)
    i.add_argument("--lang", default="eng", help="Tesseract language of image OCR")
    i.add_argument("--no-progress", action="store_true")
    i.set_defaults(func=cmd_init)

    u = esub.add_parser("user", help="accounts")
    usub = u.add_subparsers(dest="user_command", required=True)
    ua = with_db(usub.add_parser("add", help="add an account (password asked, or read from stdin / --password-env)"))
    ua.add_argument("name")
    ua.add_argument("--role", choices=ROLES, required=True)
    ua.add_argument("--password-env", help="read the password from this environment variable")
    ua.set_defaults(func=cmd_user_add)
    ul = with_db(usub.add_parser("list", help="list accounts"))
    ul.set_defaults(func=cmd_user_list)

    s = with_db(esub.add_parser("serve", help="the annotation web service (FastAPI + uvicorn)"))
    s.add_argument("--checkpoint", help="fine-tuned model proposing masks (default: the one given to init)")
    s.add_argument("--no-model", action="store_true", help="serve without proposals")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int_at_least(1, 65535), default=8000)
    s.add_argument("--media", type=Path, default=Path("runs/engine/media"), help="folder of uploaded files")
    s.add_argument("--lease-minutes", type=float, default=15.0, help="how long a task stays with its annotator")
    s.add_argument("--max-upload-mb", type=int_at_least(1, 4096), default=64)
    s.add_argument("--secure-cookie", action="store_true", help="mark the session cookie Secure (behind HTTPS)")
    s.add_argument("--device", default=None, help="model device (default: CUDA when available)")
    s.add_argument("--model-threads", type=int_at_least(1), default=None, help="model threads (default: cores − 1)")
    s.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    s.set_defaults(func=cmd_serve)

    x = with_db(esub.add_parser("export", help="annotations as COCO, JSON lines or fine-tuning shards"))
    x.add_argument("--format", choices=["coco", "shards", "jsonl"], required=True)
    x.add_argument("--out", type=Path, required=True)
    x.add_argument("--reviews", default="pending,approved", help="review states to export (default: all but rejected)")
    x.add_argument("--val-fraction", type=float, default=0.2, help="shards: fraction of documents for validation")
    x.set_defaults(func=cmd_export)

    st = with_db(esub.add_parser("stats", help="dashboard figures: stats.json and stats.png"))
    st.add_argument("--out", type=Path, default=Path("runs/engine/stats"))
    st.set_defaults(func=cmd_stats)

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

    cv = esub.add_parser("curve", help="the simulation's JSON → its table (into marked doc sections) and plot")
    cv.add_argument("result", type=Path, help="simulate.json")
    cv.add_argument("--markdown", action="append", type=Path, default=[], help="fill this file's curve section")
    cv.add_argument("--plot", type=Path, default=None, help="write the curve here")
    cv.set_defaults(func=cmd_curve)

    c = with_db(esub.add_parser("check", help="integrity check of the database (exit 1 when a problem is found)"))
    c.set_defaults(func=cmd_check)
