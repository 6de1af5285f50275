"""The package's layers, checked against the code: which CARB package may import which, which heavy
third-party libraries each may import (at module level or lazily inside a function), no import cycles,
and what importing the library layers really loads."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

CARB = Path(__file__).resolve().parents[1] / "carb"

#: Layer of each CARB module, by path prefix (longest prefix wins).
LAYERS = {
    "carb": "face", "carb.errors": "base", "carb.compute": "base", "carb.files": "base", "carb.resources": "base",
    "carb.design": "design", "carb.data": "data", "carb.measure": "measure", "carb.model": "model",
    "carb.analysis": "analysis", "carb.plots": "plots", "carb.tracking": "tracking",
    "carb.commands": "commands",
    **{f"carb.{c}": "commands" for c in ("collect", "train", "tune", "promote", "characterize", "screen",
                                         "quickstart", "import_data", "calibrate", "probe")},
}
#: Which layers each layer may import (itself included).
ALLOWED = {
    "face": {"base", "tracking", "analysis"},  # carb/__init__.py: carb.load_model -> analysis.predictor
    "base": {"base"},
    "design": {"base", "design"},
    "data": {"base", "design", "data"},
    "measure": {"base", "design", "data", "measure"},
    "model": {"base", "design", "data", "model"},
    "analysis": {"base", "design", "data", "model", "analysis"},
    "plots": {"base", "design", "data", "model", "analysis", "plots"},
    "tracking": {"base", "tracking"},
    "commands": set(LAYERS.values()),
}
#: Third-party libraries only some modules may import (module-name prefixes that may).
RESTRICTED = {
    "hydra": ("carb.commands",),
    "omegaconf": ("carb.commands",),
    "mlflow": ("carb.tracking",),
    "torch": ("carb.measure", "carb.design.resnet", "carb.design.features", "carb.design.zoo", "carb.design.trace"),
    "torchvision": ("carb.design.zoo",),   # through zoo.import_torchvision only (the CPU-wheel fix)
    "timm": ("carb.design.zoo",),
    "fvcore": ("carb.design.features",),
    "pynvml": ("carb.measure",),
    "optuna": ("carb.model.tuning", "carb.commands.tune"),
    "matplotlib": ("carb.plots",),
}


def _modules() -> dict[str, Path]:
    out = {}
    for p in CARB.rglob("*.py"):
        if "conf" in p.relative_to(CARB).parts:
            continue
        parts = list(p.relative_to(CARB.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _layer(module: str) -> str:
    best = max((k for k in LAYERS if module == k or module.startswith(k + ".")), key=len)
    return LAYERS[best]


def _imports(path: Path, module: str) -> set[str]:
    """Every module name an import statement in the file names (module level or inside functions)."""
    names: set[str] = set()
    pkg = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            names.add(base)
            for a in node.names:  # `from carb import tracking` names a module
                names.add(f"{base}.{a.name}")
    return names


MODULES = _modules()


def _carb_edges() -> dict[str, set[str]]:
    edges = {}
    for mod, path in MODULES.items():
        edges[mod] = {n for n in _imports(path, mod) if n in MODULES and n != mod}
    return edges


def test_every_module_belongs_to_a_layer():
    assert len(MODULES) > 30
    for mod in MODULES:
        assert _layer(mod) in ALLOWED, mod


def test_layers_import_only_what_they_may():
    bad = []
    for mod, deps in _carb_edges().items():
        for d in deps:
            if d == "carb":  # the package itself (``from carb import x`` resolves to the submodule)
                continue
            if _layer(d) not in ALLOWED[_layer(mod)]:
                bad.append(f"{mod} ({_layer(mod)}) imports {d} ({_layer(d)})")
    assert not bad, "\n".join(sorted(bad))


@pytest.mark.parametrize("lib", sorted(RESTRICTED))
def test_heavy_libraries_stay_in_their_rooms(lib):
    bad = sorted(mod for mod, path in MODULES.items()
                 if any(n == lib or n.startswith(lib + ".") for n in _imports(path, mod))
                 and not mod.startswith(RESTRICTED[lib]))
    assert not bad, f"{lib} imported outside {RESTRICTED[lib]}: {bad}"


def test_no_import_cycles():
    """Tarjan's strongly connected components over every import (lazy ones included)."""
    edges = _carb_edges()
    for mod in list(edges):  # a package's __init__ is imported with each of its submodules
        edges[mod] = {d for d in edges[mod] if not mod.startswith(d + ".")}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_cycle_detector_finds_a_cycle(monkeypatch):
    """The check above can fail: a fake edge carb.design.arch -> carb.design.space closes a loop."""
    real = _carb_edges

    def with_loop():
        e = real()
        e["carb.design.arch"] = e["carb.design.arch"] | {"carb.design.space"}
        return e

    monkeypatch.setitem(globals(), "_carb_edges", with_loop)
    with pytest.raises(AssertionError, match="import cycles"):
        test_no_import_cycles()


def test_library_layers_load_no_hydra_mlflow_or_torch():
    """Importing every module of design (but the torch builder), data, model and analysis loads
    neither Hydra, OmegaConf, MLflow, torch, Optuna nor matplotlib."""
    code = (
        "import importlib, json, pkgutil, sys\n"
        "for pkg in ('carb.design', 'carb.data', 'carb.model', 'carb.analysis'):\n"
        "    p = importlib.import_module(pkg)\n"
        "    for m in pkgutil.walk_packages(p.__path__, pkg + '.'):\n"
        "        if m.name != 'carb.design.resnet':\n"
        "            importlib.import_module(m.name)\n"
        "heavy = ('hydra', 'omegaconf', 'mlflow', 'torch', 'optuna', 'matplotlib')\n"
        "print(json.dumps(sorted({k.split('.')[0] for k in sys.modules if k.split('.')[0] in heavy})))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_every_module_says_what_it_is_for():
    """Each module opens with a docstring of at least one sentence (no empty or placeholder ones)."""
    bad = []
    for mod, path in MODULES.items():
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        first = doc.strip().splitlines()[0] if doc.strip() else ""
        if len(doc) < 40 or first.isupper() or "TODO" in first:
            bad.append(f"{mod}: {first!r}")
    assert not bad, bad
