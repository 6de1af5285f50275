"""File helpers any layer may use: an advisory lock beside a file, atomic replacement of a file, and
the checks a command runs on its folders and SQLite stores before any work (:func:`unwritable`,
:func:`sqlite_problem`).

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


def unwritable(path: str | Path) -> str | None:
    """Why a folder cannot be created or written at ``path`` (its nearest existing ancestor is a file,
    or not writable, e.g. a read-only file system), or None when it can."""
    import tempfile

    p = Path(path).expanduser().absolute()
    probe = p
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is a file, not a folder"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{probe} is not writable"
    try:   # what os.access cannot see (root on /proc, a read-only or full file system): try it
        os.rmdir(tempfile.mkdtemp(prefix=".carb-probe-", dir=probe))
    except OSError as e:
        return f"{probe} refuses new folders ({e.strerror})"
    return None


#: Files above this size (MB) get only the header and schema read, not SQLite's ``quick_check`` (which
#: reads every page: about a second per few hundred MB), so the check stays within seconds.
QUICK_CHECK_MAX_MB = 512


def sqlite_problem(db: str | Path, writes: bool = True, timeout_s: float = 10.0) -> str | None:
    """Why the SQLite file ``db`` cannot serve a command, in a few words, or None when it can: it is
    damaged (not a database, or SQLite's ``quick_check`` finds faults; files above
    :data:`QUICK_CHECK_MAX_MB` get only their schema read), a folder, or (with ``writes``)
    read-only or impossible to create. Reads the file read-only and changes nothing; a file another
    process holds locked for longer than ``timeout_s`` counts as fine (the command waits for it later)."""
    import sqlite3

    p = Path(db).expanduser().absolute()
    if p.is_dir():
        return f"{p} is a folder, not a SQLite file"
    if not p.exists():
        why = unwritable(p.parent) if writes else None
        return f"it does not exist and cannot be created: {why}" if why else None
    if not os.access(p, os.R_OK):
        return f"{p} is not readable"
    try:
        con = sqlite3.connect(f"{p.as_uri()}?mode=ro", uri=True, timeout=timeout_s)
        try:
            con.execute("SELECT count(*) FROM sqlite_master").fetchall()   # the header and the schema
            big = p.stat().st_size > QUICK_CHECK_MAX_MB * 2**20
            rows = [("ok",)] if big else con.execute("PRAGMA quick_check").fetchall()
        finally:
            con.close()
    except sqlite3.OperationalError as e:
        if "locked" in str(e):
            return None
        if "unable to open" in str(e):   # e.g. a WAL store in a read-only folder: not known to be damaged
            return f"SQLite cannot open it ({e})"
        return f"it is damaged ({e})"
    except sqlite3.DatabaseError as e:
        return f"it is damaged ({e})"
    if rows != [("ok",)]:
        return f"it is damaged (SQLite quick_check: {rows[0][0] if rows else 'no answer'})"
    if writes and not (os.access(p, os.W_OK) and os.access(p.parent, os.W_OK | os.X_OK)):
        return "it is read-only (the file or its folder, where SQLite writes its journal)"
    return None
