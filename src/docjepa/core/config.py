"""Typed run configuration: nested dataclasses loaded from YAML, with ``--key.sub=value`` overrides.

Every field has a type and a docstring where it is declared; unknown keys, values of the wrong type, values out
of range (checked in the classes' ``__post_init__``) and YAML syntax errors raise :class:`ConfigError` naming the
key or the line, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import yaml

from .errors import ConfigError

T = TypeVar("T")


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Check/convert one value to the annotated type ``tp``."""
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        choices = typing.get_args(tp)
        if value not in choices:
            raise ConfigError(f"{key}: expected one of {', '.join(map(repr, choices))}, got {value!r}")
        return value
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _coerce(value, args[0], key)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return from_dict(tp, value, prefix=f"{key}.")
    if origin in (list, tuple):
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        args = typing.get_args(tp)
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(value) != len(args):
                raise ConfigError(f"{key}: expected {len(args)} values, got {len(value)}")
            return tuple(_coerce(v, a, key) for v, a in zip(value, args))
        inner = args[0] if args else Any
        items = [_coerce(v, inner, key) for v in value]
        return tuple(items) if origin is tuple else items
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected true/false, got {value!r}")
    if tp is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if tp is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if tp is str and isinstance(value, (str, int, float, os.PathLike)) and not isinstance(value, bool):
        return str(value)
    raise ConfigError(f"{key}: expected {getattr(tp, '__name__', tp)}, got {value!r}")


def from_dict(cls: type[T], data: dict, prefix: str = "") -> T:
    """Build dataclass ``cls`` from a (nested) mapping, checking keys and types."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(
            f"unknown config key(s) {', '.join(prefix + u for u in unknown)}; "
            f"known: {', '.join(prefix + n for n in sorted(names))}"
        )
    kwargs = {k: _coerce(v, hints[k], prefix + k) for k, v in data.items()}
    try:
        return cls(**kwargs)
    except ConfigError as err:  # a range check in the class's __post_init__: name the key in full
        raise ConfigError(f"{prefix}{err}") from None


def parse_overrides(args: list[str]) -> dict:
    """``["--a.b=1", "--c=x"]`` → ``{"a": {"b": 1}, "c": "x"}`` (values parsed as YAML scalars/lists)."""
    out: dict = {}
    for arg in args:
        if not arg.startswith("--") or "=" not in arg:
            raise ConfigError(f"override {arg!r} must look like --key.sub=value")
        key, raw = arg[2:].split("=", 1)
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = yaml.safe_load(raw) if raw != "" else ""
    return out


def merge(base: dict, extra: dict) -> dict:
    """Recursive dict merge, ``extra`` winning."""
    out = dict(base)
    for k, v in extra.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def packaged_configs() -> list[str]:
    """Names of the configs that ship with docjepa (``pretrain/tiny``, ``finetune/tiny``, …)."""
    root = resources.files("docjepa") / "configs"
    return sorted(
        f"{d.name}/{f.name[:-5]}" for d in root.iterdir() if d.is_dir() for f in d.iterdir() if f.name.endswith(".yaml")
    )


def read_config_text(path: str | Path) -> str:
    """The text of a config: a YAML file on disk, else a config packaged with docjepa, named ``finetune/tiny`` (or
    ``configs/finetune/tiny.yaml``) wherever the command runs."""
    path = Path(path)
    if path.is_file():
        return path.read_text()
    name = path.as_posix().removeprefix("configs/").removesuffix(".yaml")
    packaged = resources.files("docjepa") / "configs" / f"{name}.yaml"
    if name and not name.startswith("/") and ".." not in name and packaged.is_file():
        return packaged.read_text()
    raise FileNotFoundError(f"config file {path} not found (packaged configs: {', '.join(packaged_configs())})")


def load_config(cls: type[T], path: str | Path | None, overrides: list[str] = ()) -> T:
    """Load ``cls`` from a YAML file or a packaged config (its defaults when ``path`` is None) plus overrides."""
    data: dict = {}
    if path is not None:
        text = read_config_text(path)
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as err:
            where = getattr(err, "problem_mark", None)
            line = f" (line {where.line + 1}, column {where.column + 1})" if where is not None else ""
            problem = getattr(err, "problem", None) or type(err).__name__
            raise ConfigError(f"{path}{line}: not valid YAML: {problem}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: the top level must be a mapping")
    return from_dict(cls, merge(data, parse_overrides(list(overrides))))


def updated(config: T, *values: dict) -> T:
    """``config`` with nested Python values set over it, in order (``{"run": {"steps": 10}, "data": {"train":
    [path]}}``), checked as a config file's are (unknown keys, types, ranges). Library code builds its configs this
    way, not as ``--key=value`` strings: a path is a path (a comma in it is no list separator), a ``Path`` is
    taken where a string is expected."""
    data = to_dict(config)
    for more in values:
        data = merge(data, more)
    return from_dict(type(config), data)


def save_config(config: Any, path: Path) -> Path:
    """Write a config as YAML (``load_config`` reads it back to the same config)."""
    Path(path).write_text(yaml.safe_dump(to_dict(config), sort_keys=False))
    return Path(path)


def to_dict(config: Any) -> dict:
    """A dataclass as plain YAML/JSON-able data."""

    def plain(v: Any) -> Any:
        if isinstance(v, tuple):
            return [plain(x) for x in v]
        if isinstance(v, list):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v

    return plain(dataclasses.asdict(config))
