"""A project script (not a package module) loaded as a module for tests: ``load_script("scripts/bench/zoo.py")``."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_script(rel_path: str, name: str) -> ModuleType:
    """The script at ``rel_path`` (relative to the repository root) executed as a fresh module named ``name``."""
    spec = importlib.util.spec_from_file_location(name, ROOT / rel_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
