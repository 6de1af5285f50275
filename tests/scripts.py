"""Loading a script of the repository (experiments/...) as a module, for the tests of its functions."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_script(rel: str, name: str) -> ModuleType:
    """The file ``ROOT/rel`` imported as module ``name`` (registered in ``sys.modules``)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / rel)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod
