"""Expected errors (a wrong input or setting the user can fix) and the one place that reports them.

Commands raise :class:`UsageError` (or an ``OSError`` about a path, or a ``ValueError`` of this package's own
checks) for things the user can fix; :func:`run_command` prints those as one line and exits with status 2.
Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

PACKAGES = ("docjepa", "rsngd")


class UsageError(ValueError):
    """A wrong input, setting or file the user can fix; reported as one line, exit status 2."""


class ConfigError(UsageError):
    """A config file or override that cannot be used (syntax, unknown key, wrong type, value out of range)."""


def positive(name: str, value: int | float, minimum: int | float = 1) -> None:
    """Raise :class:`ConfigError` unless ``value`` ≥ ``minimum`` (booleans are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum:
        raise ConfigError(f"{name} must be at least {minimum}, got {value!r}")


def _raised_here(err: BaseException) -> bool:
    """Was ``err`` raised by a ``raise`` in this project's own code (not deep inside a library)? The module of the
    innermost frame says so, wherever the package is installed."""
    tb = err.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    module = str(tb.tb_frame.f_globals.get("__name__", ""))
    return module.split(".")[0] in PACKAGES


def is_expected(err: BaseException) -> bool:
    """Errors the user can fix: :class:`UsageError`, an ``OSError`` about a file (missing, exists, permission,
    full disk), YAML syntax, or a ``ValueError`` raised by this project's own checks."""
    import yaml

    if isinstance(err, (UsageError, yaml.YAMLError)):
        return True
    if isinstance(err, OSError) and (err.filename is not None or err.errno is not None):
        return True
    if isinstance(err, (FileNotFoundError, FileExistsError)):
        return True
    return type(err) is ValueError and _raised_here(err)


def run_command(prog: str, fn: Callable[[], None]) -> None:
    """Run a command: expected errors become ``prog: message`` on stderr and exit status 2."""
    try:
        fn()
    except Exception as err:
        if not is_expected(err):
            raise
        message = str(err) or type(err).__name__
        if isinstance(err, OSError) and err.filename is not None and str(err.filename) not in message:
            message = f"{message}: {err.filename}"
        print(f"{prog}: {message}", file=sys.stderr)
        sys.exit(2)
