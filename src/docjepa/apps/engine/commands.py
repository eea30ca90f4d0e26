"""What each ``docjepa engine …`` subcommand does (its options are declared in :mod:`.cli`)."""

from __future__ import annotations

import getpass
import json
import os
import sys
from pathlib import Path

from ...core.errors import UsageError
from ..model_names import SHIPPED
from .db import Database


def _model(name: str | None) -> str | None:
    """A ``--checkpoint`` value: ``shipped`` names the model in the package (by its folder, as any model is
    stored), anything else is a run, checkpoint or model folder."""
    if name != SHIPPED:
        return name
    from ...modeling.shipped import has_shipped_model, shipped_dir

    if not has_shipped_model():
        raise UsageError("this installation has no shipped model")
    return str(shipped_dir())


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

        checkpoint = _model(args.checkpoint)
        require_model(checkpoint, (SEGMENTATION,), "proposing masks")
        result["checkpoint"] = store.set_serving_model(db, checkpoint)
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


def cmd_user_change(args) -> None:
    """``engine user passwd|role|disable|enable NAME``: audited as done from the command line (no user)."""
    from . import store

    db = _db(args)
    try:
        uid = store.user_id(db, args.name)
        if args.change == "passwd":
            result = store.set_password(db, uid, _password(args), by=None)
        elif args.change == "role":
            result = store.set_role(db, uid, args.role, by=None)
        else:
            result = store.set_active(db, uid, args.change == "enable", by=None)
    except (store.Invalid, store.NotFound) as err:
        raise UsageError(str(err)) from None
    print(json.dumps(result))


def cmd_user_list(args) -> None:
    from . import store

    print(json.dumps(store.list_users(_db(args)), indent=1))


def cmd_serve(args) -> None:
    import uvicorn

    from . import store
    from .app import ServerConfig, create_app

    db = _db(args)
    checkpoint = _model(args.checkpoint)
    if checkpoint is None and not args.no_model:
        checkpoint = store.serving_model(db)
        if checkpoint is None:
            raise UsageError("give --checkpoint RUN (or --no-model to annotate without proposals)")
    cfg = ServerConfig(
        db=args.db,
        checkpoint=None if args.no_model else checkpoint,
        media=str(args.media),
        lease_seconds=args.lease_minutes * 60,
        max_upload_bytes=args.max_upload_mb * 2**20,
        secure_cookie=secure_cookie(args.secure_cookie, args.host),
        device=args.device,
        model_threads=args.model_threads,
        model_queue=args.model_queue,
        model_batch=args.model_batch,
        sign_in_free_attempts=args.sign_in_free_attempts,
        sign_in_free_per_address=args.sign_in_free_per_address,
        sign_in_base_delay=args.sign_in_base_delay,
        sign_in_max_delay=args.sign_in_max_delay,
        allowed_origins=args.allowed_origin,
        api_docs=args.api_docs,
    )
    workers = args.workers or (2 if cfg.checkpoint is not None and (os.cpu_count() or 1) >= 2 else 1)
    if workers == 1:
        app = create_app(cfg)
        model = app.state.proposer.version if app.state.proposer else "none"
        print(f"annotate at http://{args.host}:{args.port}/  (model: {model})", flush=True)
        uvicorn.run(app, **server_options(args))
        return
    # Several processes, each with its own model and its own GIL, sharing the database (leases, sign-ins and
    # proposals live there) and the listening socket.
    from dataclasses import asdict

    from .app import CONFIG_ENV

    db.require_schema()
    if cfg.checkpoint is not None:
        from ...modeling.files import SEGMENTATION, require_model

        require_model(cfg.checkpoint, (SEGMENTATION,), "proposing masks")  # a bad model fails here, once
        store.set_serving_model(db, cfg.checkpoint)
    cfg.model_threads = cfg.model_threads or max(1, ((os.cpu_count() or 2) - 1) // workers)
    os.environ[CONFIG_ENV] = json.dumps(asdict(cfg))
    print(f"annotate at http://{args.host}:{args.port}/  ({workers} workers, model: {cfg.checkpoint})", flush=True)
    target = "docjepa.apps.engine.app:app_from_environment"
    uvicorn.run(target, factory=True, **server_options(args) | {"workers": workers})


LOOPBACK = ("127.0.0.1", "::1", "localhost")


def secure_cookie(asked: bool | None, host: str) -> bool:
    """Whether the session cookie is marked Secure: as asked, else on unless the service listens on loopback only
    (anywhere else the cookie must not travel over plain HTTP)."""
    if asked is not None:
        return asked
    return not (host in LOOPBACK or host.startswith("127."))


def server_options(args) -> dict:
    """uvicorn's settings for ``serve``: proxy headers (X-Forwarded-For, X-Forwarded-Proto) are believed only from
    the proxies named by ``--forwarded-allow-ips``; by default from none, so a client cannot choose the address
    the sign-in throttle counts against by sending the header itself."""
    trusted = args.forwarded_allow_ips.strip()
    return {
        "host": args.host,
        "port": args.port,
        "log_level": args.log_level,
        "workers": 1,
        "proxy_headers": bool(trusted),
        "forwarded_allow_ips": trusted or None,
    }


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
            propose_questions(
                db, _model(args.checkpoint) or serving_checkpoint(db), args.bank_min_score, not args.no_progress
            ),
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
                db,
                _model(args.checkpoint) or serving_checkpoint(db),
                args.agree,
                args.target,
                args.limit,
                not args.no_progress,
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
    from .simulation.curve import write_report

    print(write_report(args.result, args.markdown, args.plot))


def cmd_simulate(args) -> None:
    import logging

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from .simulation.run import SimConfig, simulate

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
