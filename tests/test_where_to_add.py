"""docs/development.md, "Where to add": each path it gives is checked here against the code, so that a recipe, a
question kind and an engine endpoint each need only the files it names."""

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"


def test_a_recipe_is_one_entry_of_recipes_py(monkeypatch):
    """The factory and the benchmark derive their entries from RECIPES; nothing else lists the recipes."""
    import rsngd
    from rsngd import recipes
    from rsngd.bench.optimizers import DEFAULTS, recipe_settings
    from rsngd.factory import METHODS

    for name in recipes.RECIPES:
        assert name in METHODS and DEFAULTS[name] == recipe_settings(name)
    new = recipes.Recipe("rsngd-test", lr=1e-3, adamw_lr=2e-3, projected={"rank": 2, "history": 3})
    monkeypatch.setitem(recipes.RECIPES, new.name, new)
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    named = [(f"mlp.{n}", p) for n, p in model.named_parameters()]
    opt = rsngd.create_optimizer(named, "rsngd-test")
    assert (opt.param_groups[0]["rank"], opt.param_groups[0]["history"], opt.param_groups[0]["lr"]) == (2, 3, 1e-3)
    assert rsngd.RSNGD([torch.nn.Parameter(torch.randn(8, 8))]).param_groups[0]["rank"] == 1 / 8  # still rsngd's


def test_a_question_kind_is_a_layout_template_with_its_wordings():
    """Synthetic: a layout asks it (``layouts.py``: templates, kind, answers; the business grammar from its tables
    in ``business.py``); ``phrasings.py`` gives it more wordings keyed by its first template. Real PDFs: a rule in
    ``structure.py``, whose ``KINDS`` are the registry's structure kinds (``data.kinds``), which the real-page
    benchmark reads from there. Scores are kept per kind from each question's own ``kind``."""
    from docjepa.apps import real_benchmark
    from docjepa.data import structure
    from docjepa.data.synth.phrasings import EXTRA

    layouts = (SRC / "docjepa" / "data" / "synth" / "layouts.py").read_text()
    asked = {
        c.value
        for node in ast.walk(ast.parse(layouts))
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "ask" and node.args
        for c in ast.walk(node.args[0])
        if isinstance(c, ast.Constant) and isinstance(c.value, str)
    }
    from docjepa.data.synth import business  # the business grammar asks from its tables of templates

    tables = (business.QUESTIONS, business.NAMES, business.PARTIES)
    asked |= {t for table in tables for ts in table.values() for t in ts}
    assert set(EXTRA) <= asked, sorted(set(EXTRA) - asked)  # every extra wording belongs to a template asked
    assert real_benchmark.KINDS is structure.KINDS
    from docjepa.data import kinds

    assert kinds.asked_by("structure") == structure.KINDS and "field" in kinds.GENERATED_KINDS
    from docjepa.eval.scores import Scores

    s = Scores()
    s.add("a-new-kind", 3, 4)
    assert "a-new-kind" in s.summary()["per_type"]


def test_an_engine_endpoint_is_a_route_in_its_resources_router():
    """One router per resource in ``routers/``, each listed in ``routers.ALL``, which ``create_app`` includes."""
    from docjepa.apps.engine import routers

    modules = [m.name for m in pkgutil.iter_modules(routers.__path__)]
    listed = [id(r) for r in routers.ALL]
    for name in modules:
        module = importlib.import_module(f"docjepa.apps.engine.routers.{name}")
        assert id(module.router) in listed, f"routers/{name}.py is not in routers.ALL"
    assert len(listed) == len(modules)
    app_source = (SRC / "docjepa" / "apps" / "engine" / "app.py").read_text()
    assert "for router in ROUTERS:" in app_source and "app.include_router(router)" in app_source


@pytest.mark.parametrize(
    "path",
    [
        "src/rsngd/recipes.py",
        "src/docjepa/data/synth/layouts.py",
        "src/docjepa/data/synth/phrasings.py",
        "src/docjepa/data/structure.py",
        "src/docjepa/apps/engine/routers/auth.py",
        "src/docjepa/apps/engine/schemas.py",
    ],
)
def test_the_files_the_docs_name_exist_and_are_named_there(path):
    doc = (SRC.parent / "docs" / "development.md").read_text()
    folder, name = path.removeprefix("src/").rsplit("/", 1)
    named = path.removeprefix("src/") in doc or (name == "auth.py" and f"{folder}/<resource>.py" in doc)
    assert (SRC.parent / path).is_file() and named
