"""What a wheel of the project holds: every folder of modules is a package (setuptools' ``find`` passes over a
folder without ``__init__.py``, so an installed copy would lack it), and the data files code looks up by package."""

from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = SRC.parent
NOT_PACKAGES = {"migrations", "versions"}  # Alembic's scripts, shipped as package data


def test_every_folder_of_modules_is_a_package():
    missing = [
        str(d.relative_to(SRC))
        for d in SRC.rglob("*")
        if d.is_dir()
        and any(d.glob("*.py"))
        and not NOT_PACKAGES & set(d.relative_to(SRC).parts)
        and not (d / "__init__.py").is_file()
    ]
    assert missing == []


def test_the_data_files_are_declared_as_package_data():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    found = {pkg: [p for g in globs for p in (SRC / pkg.replace(".", "/")).glob(g)] for pkg, globs in data.items()}
    assert all(found.values()), {pkg: globs for pkg, globs in data.items() if not found[pkg]}
    shipped = {p for paths in found.values() for p in paths}
    for needed in [
        "docjepa/configs/finetune/tiny.yaml",
        "rsngd/bench/settings/tuned.json",
        "docjepa/apps/engine/static/index.html",
        "docjepa/apps/questions/real.json",
        "docjepa/pretrained/model.safetensors",
        "docjepa/pretrained/model_card.json",
    ]:
        assert SRC / needed in shipped
