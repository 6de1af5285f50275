"""File helpers any layer may use: an advisory lock beside a file, and atomic replacement of a file.

One place for both, so every writer (datasets, the collector's appender, the SQLite stores of MLflow
and Optuna) behaves the same way: a reader never sees a half-written file, and processes that set up
one store at once wait for each other instead of racing.
"""
from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


def lock_path(path: str | Path) -> Path:
    """The lock file of ``path``: ``<path>.lock`` in the same folder."""
    p = Path(path)
    return p.with_name(p.name + ".lock")


@contextmanager
def locked(path: str | Path) -> Iterator[Path]:
    """Hold an exclusive advisory lock (``flock``) on ``<path>.lock`` for the ``with`` block; the folder
    is created if needed. Blocks until other holders release it. Yields the lock file's path."""
    import fcntl

    lp = lock_path(path)
    lp.parent.mkdir(parents=True, exist_ok=True)
    with open(lp, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield lp
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def write_atomic(path: str | Path, write: Callable[[Path], object]) -> Path:
    """Write ``path`` by calling ``write(tmp)`` on a temp file in the same folder (unique per call),
    then renaming it over ``path``: readers see the old file or the new one, never a partial one.
    The temp file is removed if ``write`` fails. Returns ``path``."""
    p = Path(path)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        write(tmp)
        os.replace(tmp, p)
    finally:
        if tmp.exists():
            tmp.unlink()
    return p
