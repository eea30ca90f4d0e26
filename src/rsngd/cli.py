"""The ``rsngd`` command line."""

from __future__ import annotations

import sys

USAGE = """usage: rsngd COMMAND [options]

commands:
  demo     RS-SNGD against AdamW on a small character-level transformer
  bench    the optimizer benchmark (rsngd bench --help); rsngd bench report RESULTS… for tables and plots;
           rsngd bench tune (both lrs of every method), rsngd bench retune (one lr again at a longer horizon)
"""


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return
    command, rest = argv[0], argv[1:]
    if command == "demo":
        from .demo import main as demo

        demo(rest)
    elif command == "bench":
        from .bench.cli import bench_main

        bench_main(rest)
    else:
        print(USAGE, file=sys.stderr)
        raise SystemExit(f"rsngd: unknown command {command!r}")


if __name__ == "__main__":
    main()
