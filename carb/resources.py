"""Where CARB's packaged files are: the config tree and the shipped data files.

``carb/conf`` is a link to the repository's top-level ``conf/`` (the layout users edit); a wheel build
follows the link and ships the files inside the package, so an installed ``carb`` finds its configs from
any working directory.
"""
from __future__ import annotations

from pathlib import Path

#: The config tree (``conf/``): primary configs of the commands and their config groups.
CONF_DIR: Path = Path(__file__).resolve().parent / "conf"
#: The shipped data files (reference dataset, third-party tables, their provenance and licenses).
DATA_DIR: Path = Path(__file__).resolve().parent / "data"
