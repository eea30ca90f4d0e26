"""The ``rsngd`` command line: argparse subcommands, each registered by the module that runs it (its
``add_parser(sub)`` sets ``func``), the way ``docjepa``'s are."""

from __future__ import annotations

import argparse
import sys

from . import demo
from .bench import cli as bench


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="rsngd", description="RS-SNGD: random-subspace natural gradient descent.")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo.add_parser(sub)
    bench.add_parser(sub)
    return ap


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.command_line = ["rsngd", *argv]  # as typed: reports write the command that made them
    args.func(args)


if __name__ == "__main__":
    main()
