"""The ``docjepa`` command line: argparse subcommands, each group added by its module's ``add_parsers`` (which sets
``func``), the data engine's by ``apps.engine.cli.add_parser``, as ``rsngd``'s are added by their modules."""

from __future__ import annotations

import argparse
import sys

from ...core.errors import run_command
from . import answers, data, train
from .args import int_at_least
from .train import OVERRIDABLE


def build_parser() -> argparse.ArgumentParser:
    from ..engine.cli import add_parser as add_engine_parser

    ap = argparse.ArgumentParser(prog="docjepa", description="Document-JEPA: data, training and prediction.")
    sub = ap.add_subparsers(dest="command", required=True)
    data.add_parsers(sub)
    train.add_parsers(sub)
    answers.add_parsers(sub)
    add_engine_parser(sub, int_at_least)
    return ap


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args, extra = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    if extra and args.command not in OVERRIDABLE:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.overrides = extra
    name = " ".join(x for x in (args.command, getattr(args, "engine_command", None)) if x)
    run_command(f"docjepa {name}", lambda: args.func(args))


if __name__ == "__main__":
    main()


if __name__ == "__main__":
    main()
