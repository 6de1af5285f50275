"""Progress of tracing many networks on a cold trace cache: the loops that build the layer tables of a zoo
dataset or a zoo screen (:func:`carb.design.zoo_features.layer_columns`,
:func:`carb.design.zoo_inputs.zoo_features_frame`) step through :func:`tracing`, which reports each network
that is not in the trace cache yet (:func:`carb.design.trace.cache_path`) when a command set a reporter
(:func:`reporting`) and at least :data:`MIN_COLD` of the networks are missing; cached ones are quiet, and so
are those the tracer refused on an earlier run (the cache records the refusal): a warm run prints nothing,
unless it reads at least :data:`MIN_WARM` networks (minutes of reading: a count every ``1 / WARM_LINES`` of them).

Library code never prints: the reporter is the command's (:func:`carb.commands.progress.trace_progress`,
a :class:`carb.commands.progress.Progress` with its count and ETA), set for the command's run only; a
script or a test that calls the library directly has none, and nothing is printed.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from typing import Protocol


class Reporter(Protocol):
    """What :func:`tracing` drives: one ``begin(label)`` as each uncached network starts, ``finish(label)``
    at the end (:class:`carb.commands.progress.Progress` is one)."""

    def begin(self, label: str, weight: float = 1.0) -> None: ...

    def finish(self, label: str = "done") -> None: ...


#: Fewest networks missing from the trace cache for a progress line: fewer trace in a few seconds.
MIN_COLD = 8

#: Fewest distinct networks for a progress line on a warm cache: reading and summarizing a cached layer table
#: takes about 0.06 s (timm's RTX 4090 file: 1,627 networks, about 2 min with no line, ux7's cProfile).
MIN_WARM = 200
#: Most progress lines of a warm read (one per this share of the networks).
WARM_LINES = 20
#: The command's reporter factory (``total uncached networks -> Reporter``); None: quiet.
_START: ContextVar[Callable[[int], Reporter] | None] = ContextVar("carb_trace_progress", default=None)


@contextlib.contextmanager
def reporting(start: Callable[[int], Reporter]) -> Iterator[None]:
    """While the block runs, :func:`tracing` reports through ``start(n_uncached)``'s reporter."""
    token = _START.set(start)
    try:
        yield
    finally:
        _START.reset(token)


def uncached(pairs: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
    """The distinct ``(zoo name, input size px)`` of ``pairs`` whose batch-1 trace is not in the disk cache
    (``module:`` names are never cached by name: left out; nor is a network the tracer refused before, whose
    refusal the cache records, :func:`carb.design.trace.refusal_path`), in first-seen order."""
    from carb.design.trace import cache_path, model_key, refusal_path

    out: list[tuple[str, int]] = []
    for name, size in dict.fromkeys((str(n), int(s)) for n, s in pairs):
        if name.startswith("module:"):
            continue
        path = cache_path(model_key(name), (3, size, size))
        if not path.exists() and not refusal_path(path).exists():
            out.append((name, size))
    return out


@contextlib.contextmanager
def tracing(pairs: Iterable[tuple[str, int]]) -> Iterator[Callable[[str, int], None]]:
    """A ``step(name, size)`` to call before each network of ``pairs`` (``(zoo name, input size px)``) is
    traced: with a reporter set and at least :data:`MIN_COLD` uncached networks, each uncached one begins a
    unit ``tracing <name> at <size> px (i/n)`` and the block's end finishes it (an error closes it without
    a line); with fewer uncached but at least :data:`MIN_WARM` distinct networks, :func:`reading`'s count;
    otherwise a no-op."""
    start = _START.get()
    pairs = list(pairs)
    todo = uncached(pairs) if start is not None else []
    if start is not None and len(todo) < MIN_COLD and len(distinct := dict.fromkeys(pairs)) >= MIN_WARM:
        with reading(start, list(distinct)) as step:   # a warm cache of many networks: minutes of reading
            yield step
        return
    if start is None or len(todo) < MIN_COLD:
        yield lambda name, size: None
        return
    with _counted(start(len(todo)), todo,
                  lambda name, size, i: f"tracing {name} at {size} px ({i}/{len(todo)}, not in the trace cache)",
                  lambda n: f"traced {n} networks into the trace cache") as step:
        yield step


@contextlib.contextmanager
def _counted(reporter: Reporter, keys: Iterable[tuple[str, int]], begin: Callable[[str, int, int], str | None],
             done: Callable[[int], str]) -> Iterator[Callable[[str, int], None]]:
    """A ``step(name, size)`` that counts the first call of each of ``keys`` (``(zoo name, input size px)``) and
    begins ``reporter``'s unit with ``begin(name, size, i)`` (i: that count, from 1; None: no line); the block's
    end finishes it with ``done(count)``, an error closes it without a line (the heartbeat stopped)."""
    left, count = set(keys), [0]

    def step(name: str, size: int) -> None:
        key = (str(name), int(size))
        if key in left:
            left.discard(key)
            count[0] += 1
            if (line := begin(name, size, count[0])) is not None:
                reporter.begin(line)

    try:
        yield step
    except BaseException:
        getattr(reporter, "close", lambda: None)()
        raise
    reporter.finish(done(count[0]))


@contextlib.contextmanager
def reading(start: Callable[[int], Reporter], distinct: list[tuple[str, int]]) -> Iterator[Callable[[str, int], None]]:
    """:func:`tracing`'s ``step`` for a warm cache of many networks (``distinct``: the ``(zoo name, input size
    px)`` pairs, no repeats): one unit ``reading layer tables: <name> at <size> px (i/n, cached)`` per
    ``n / WARM_LINES`` networks, so the command shows a count and an ETA rather than minutes of silence."""
    chunk = max(1, -(-len(distinct) // WARM_LINES))
    with _counted(start(-(-len(distinct) // chunk)), distinct,
                  lambda name, size, i: (f"reading layer tables: {name} at {size} px ({i}/{len(distinct)}, cached)"
                                         if (i - 1) % chunk == 0 else None),
                  lambda n: f"read the layer tables of {n} networks") as step:
        yield step
