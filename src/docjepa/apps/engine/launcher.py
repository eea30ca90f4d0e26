"""Child processes of the ``docjepa`` command: a retraining round started from the page (it outlives the request
that started it), and the fine-tuning run of a round (waited for)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def docjepa_argv(args: list) -> list[str]:
    """The command line of ``docjepa ARGS`` run by this Python (the environment the service runs in)."""
    return [sys.executable, "-m", "docjepa.apps.cli", *map(str, args)]


def start(args: list, log: Path) -> subprocess.Popen:
    """Start ``docjepa ARGS`` in a session of its own, its output (stdout and stderr) going to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as f:  # the child holds its own copy of the descriptor
        return subprocess.Popen(docjepa_argv(args), stdout=f, stderr=subprocess.STDOUT, start_new_session=True)


def run(args: list, what: str) -> None:
    """Run ``docjepa ARGS`` to its end; RuntimeError naming ``what`` with the end of its stderr when it fails."""
    done = subprocess.run(docjepa_argv(args), capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
