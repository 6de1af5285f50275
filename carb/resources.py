"""Where CARB's packaged files are: the config tree and the shipped data files.

``carb/conf`` is a link to the repository's top-level ``conf/`` (the layout users edit); a wheel build
follows the link and ships the files inside the package, so an installed ``carb`` finds its configs from
any working directory.
"""
from __future__ import annotations

import os
from pathlib import Path

#: The config tree (``conf/``): primary configs of the commands and their config groups.
CONF_DIR: Path = Path(__file__).resolve().parent / "conf"
#: The shipped data files (reference dataset, third-party tables, their provenance and licenses).
DATA_DIR: Path = Path(__file__).resolve().parent / "data"


def carb_home() -> Path:
    """CARB's home folder, where the default stores live (``<home>/mlruns/mlflow.db``, ``optuna.db``):
    ``$CARB_HOME`` when set; else the repository root when running from a source checkout (the folder
    holding ``pyproject.toml`` beside the package), so every command and :func:`carb.load_model` find one
    store whatever the working directory; else ``$XDG_DATA_HOME/carb`` (``~/.local/share/carb``)."""
    env = os.environ.get("CARB_HOME")
    if env:
        return Path(env).expanduser().resolve()
    repo = Path(__file__).resolve().parent.parent
    if (repo / "pyproject.toml").exists() and (repo / "carb").is_dir():
        return repo
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "carb"


def cache_dir() -> Path:
    """Where CARB keeps what it can rebuild (the empty MLflow store new stores start from,
    :func:`carb.tracking.store.seed_from_template`): ``$CARB_CACHE`` when set, else
    ``$XDG_CACHE_HOME/carb`` (``~/.cache/carb``). Deleting it loses nothing."""
    env = os.environ.get("CARB_CACHE")
    if env:
        return Path(env).expanduser().resolve()
    return Path(os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")) / "carb"


def installed_versions(dists: tuple[str, ...]) -> dict[str, str]:
    """``{distribution: installed version}`` of ``dists`` (``none`` where not installed; nothing is imported):
    the library part of the keys of what :func:`cache_dir` keeps."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for dist in dists:
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = "none"
    return out


def default_tracking_uri() -> str:
    """The embedded MLflow store: ``sqlite:///<carb_home()>/mlruns/mlflow.db``."""
    return f"sqlite:///{carb_home() / 'mlruns' / 'mlflow.db'}"
