"""Layers import one way: every import inside ``src/`` goes to the same layer or a lower one.

docjepa: core (config, errors), data → modeling → train, inference → textenc, eval → apps → apps.cli. rsngd:
the optimizer core → bench → demo, cli. docjepa may import rsngd (a library below it); rsngd never imports
docjepa. ``docsections`` (markdown sections the reports fill) lies below both and imports neither.
"""

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

# Module prefix → layer; the longest matching prefix wins.
LAYERS = {
    "docsections": -1,
    "rsngd": 0,
    "rsngd.bench": 1,
    "rsngd.demo": 2,
    "rsngd.cli": 2,
    "docjepa": 16,  # the package's face (its __init__) may export from every layer; every module lives in one
    "docjepa.core": 10,
    "docjepa.data": 10,
    "docjepa.modeling": 11,
    "docjepa.train": 12,
    "docjepa.inference": 12,
    "docjepa.textenc": 13,
    "docjepa.eval": 13,
    "docjepa.apps": 14,
    # Inside the data engine, the served code never imports the simulation; only the command's modules do.
    "docjepa.apps.engine.simulation": 14.5,
    "docjepa.apps.engine.cli": 14.7,
    "docjepa.apps.engine.commands": 14.7,
    "docjepa.apps.cli": 15,
}


def layer(module: str) -> tuple[str, int]:
    best = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return best, LAYERS[best]


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, root: Path) -> list[tuple[int, str]]:
    """(line, absolute module) of every import of the project's own packages in a file, lazy ones included."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
                if not node.module:  # "from . import x": x is a module of that package
                    found += [(node.lineno, f"{target}.{a.name}") for a in node.names]
                    continue
            else:
                target = node.module or ""
            found.append((node.lineno, target))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
    return [(line, t) for line, t in found if t.split(".")[0] in ("rsngd", "docjepa", "docsections")]


def backward_imports(root: Path) -> list[str]:
    bad = []
    for path in sorted(root.rglob("*.py")):
        here, own = layer(module_name(path, root))
        for line, target in imports(path, root):
            _, other = layer(target)
            if other > own:
                bad.append(f"{path.relative_to(root)}:{line}: {here} (layer {own}) imports {target} (layer {other})")
    return bad


def test_no_import_runs_backwards():
    assert backward_imports(SRC) == []


def test_the_check_finds_a_backward_import(tmp_path):
    """The walker sees relative, absolute and lazy imports (a check that cannot fail would prove nothing)."""
    pkg = tmp_path / "docjepa"
    (pkg / "data").mkdir(parents=True)
    (pkg / "train").mkdir()
    for d in (pkg, pkg / "data", pkg / "train"):
        (d / "__init__.py").write_text("")
    (pkg / "train" / "loop.py").write_text("from ..data import shards\n")  # forward: allowed
    (pkg / "data" / "shards.py").write_text("def f():\n    from ..train.loop import x\n")  # lazy, backwards
    (pkg / "data" / "other.py").write_text("import docjepa.modeling.model\n")  # absolute, backwards
    bad = backward_imports(tmp_path)
    assert len(bad) == 2
    assert any("shards.py:2" in b and "docjepa.train.loop" in b for b in bad)
    assert any("other.py:1" in b and "docjepa.modeling.model" in b for b in bad)


@pytest.mark.parametrize("module", ["docjepa.data.prompt", "docjepa.modeling.files", "docjepa.train.trainer"])
def test_moved_components_live_in_their_layer(module):
    assert layer(module)[1] == LAYERS[module.rsplit(".", 1)[0]]


def module_graph(root: Path) -> dict[str, set[str]]:
    """Module → the project's modules it imports (lazy ones included); ``from pkg import name`` counts as an
    import of ``pkg.name`` where that is a module, else of ``pkg``; a package's ``__init__`` is left out (it only
    gathers the package's face)."""
    modules = {module_name(p, root) for p in root.rglob("*.py") if p.name != "__init__.py"}
    graph: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        if path.name == "__init__.py":
            continue
        name = module_name(path, root)
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                package = name.rpartition(".")[0]
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    targets.add(sub if sub in modules else target)
            elif isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def import_circles(root: Path) -> list[list[str]]:
    """Every strongly connected set of more than one module (Tarjan): modules that import each other."""
    graph = module_graph(root)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_modules_import_each_other():
    assert import_circles(SRC) == []


def test_the_check_finds_an_import_circle(tmp_path):
    pkg = tmp_path / "rsngd"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from . import a, b\n")
    (pkg / "a.py").write_text("from .b import x\n")
    (pkg / "b.py").write_text("def f():\n    from . import a\n")  # lazy, back to a
    (pkg / "c.py").write_text("from . import a\n")  # one way: no circle
    assert import_circles(tmp_path) == [["rsngd.a", "rsngd.b"]]


def test_the_docjepa_root_is_only_the_packages_face():
    """Every module lives in its layer's folder; the root holds the package's face (and its packaged configs)."""
    assert sorted(p.name for p in (SRC / "docjepa").glob("*.py")) == ["__init__.py"]
