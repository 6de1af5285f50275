"""The one helper that writes generated Markdown into the docs: the text between
``<!-- <name>:start -->`` and ``<!-- <name>:end -->`` in a file is replaced, nothing else is touched."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def markers(name: str) -> tuple[str, str]:
    """The start and end markers of block ``name`` (e.g. ``results``)."""
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


def splice(path: Path, name: str, text: str) -> None:
    """Replace block ``name`` of ``path`` (a Markdown file) with ``text``.

    Raises ``SystemExit`` with one line when the file lacks either marker, so a script never appends
    or truncates a document silently."""
    start, end = markers(name)
    src = Path(path).read_text()
    if start not in src or end not in src:
        raise SystemExit(f"{path} lacks the markers {start} ... {end}")
    head, rest = src.split(start, 1)
    _, tail = rest.split(end, 1)
    Path(path).write_text(f"{head}{start}\n{text.strip()}\n{end}{tail}")
    print(f"{Path(path).name}: block '{name}' regenerated")
