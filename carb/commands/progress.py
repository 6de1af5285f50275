"""Progress with an ETA for the commands' long steps: one line per step on stderr, readable in a terminal
and in a log file alike (no carriage returns, no bar redrawing).

    carb-train: [ 22%] fit stage 2/3: energy_J; 4 s elapsed, ETA 14 s

Library code never prints: it takes a plain ``progress(label)`` callable that it calls as each unit of
work *starts* (:meth:`Progress.hook`), or the command calls :meth:`Progress.begin` / :meth:`Progress.advance`
itself. A unit carries a weight (a cascade refit weighs as much as all the stages of the main fit).

ETA: the rate is measured on finished units only (seconds up to the last unit boundary / the finished
weight); the time left is that rate times the weight not yet finished, less the seconds already spent in
the unit now running, and never less than the rate times the units after it. So while one long unit runs
(heartbeat lines) the ETA counts down and then holds; it changes upwards only when a unit finishes slower
than the ones before it, never because the clock runs on (``elapsed / done * remaining`` grew with the
elapsed time inside a long unit: 15 -> 35 min on a job that took 2). The ``progress`` config group
(``conf/progress/default.yaml``) turns it off (``progress.enabled=false``) and throttles loops of many
short units (``progress.min_interval_s``).

Heartbeat: inside one long unit (a refit of several minutes) a background thread repeats the current line,
marked ``(still running)``, whenever nothing was printed for ``progress.heartbeat_s`` (15 s; 0 = off). It
runs in a terminal and in a log file alike (plain lines, at most one per ``heartbeat_s``), starts with the
first unit and stops at :meth:`Progress.finish` or :meth:`Progress.close` (a daemon thread: it never keeps
the process alive). Heartbeats run only inside :func:`heartbeats` (every command's run, through
:func:`carb.commands.cli.hydra_command`, and ``carb-quickstart``), never when library code or a test calls a
``run_*`` function directly, and all stop when the command ends, also after an error.
"""
from __future__ import annotations

import contextlib
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any, TextIO

#: Widest progress line: a longer label is shortened (``...``) so the line keeps its timing within it.
LINE_WIDTH = 120
#: Progress objects whose heartbeat thread runs (:func:`stop_heartbeats` stops them at a command's end).
_RUNNING: weakref.WeakSet = weakref.WeakSet()
#: Set while a command runs (:func:`heartbeats`): only then do heartbeat threads start.
_ALLOWED = threading.Event()


def format_duration(seconds: float) -> str:
    """``"<1 s"``, ``"42 s"``, ``"3 min 05 s"``, ``"1 h 02 min"``."""
    if not seconds == seconds or seconds < 0:  # NaN or negative: unknown
        return "?"
    s = int(round(seconds))
    if seconds < 1:
        return "<1 s"
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {(s % 3600) // 60:02d} min"


class Progress:
    """Weighted progress of one command's work, printed as lines ``<prefix>: [p%] label; elapsed, ETA``.

    ``total``: the planned weight (units of work; :meth:`add` grows it); ``enabled``: print at all;
    ``min_interval_s``: within a run of units, print at most one line per this many seconds (the first
    unit and :meth:`finish` always print); ``heartbeat_s``: repeat the current line after this many silent
    seconds (0 = never; see the module docstring); ``stream``: default stderr; ``clock``: for tests."""

    def __init__(self, prefix: str, total: float, enabled: bool = True, min_interval_s: float = 0.0,
                 stream: TextIO | None = None, clock: Callable[[], float] = time.monotonic,
                 heartbeat_s: float = 0.0) -> None:
        self.prefix, self.total, self.enabled = prefix, float(total), bool(enabled)
        self.min_interval_s, self.stream, self.clock = float(min_interval_s), stream, clock
        self.heartbeat_s = float(heartbeat_s or 0.0)
        self.done, self.current, self.count = 0.0, 0.0, 0
        self.t0 = clock()
        self.t_done = 0.0   # seconds from t0 to the last unit boundary (begin / advance)
        self.last_print = float("-inf")
        self.label = ""
        self.lines: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def from_cfg(cls, prefix: str, total: float, cfg: Any = None, throttle: bool = True, **kw: Any) -> Progress:
        """A :class:`Progress` set by the ``progress`` config node (``enabled``, ``min_interval_s``);
        enabled with no throttle when the config has no such node. ``throttle=False``: every unit prints
        (few long steps, such as a cascade's stages and refits)."""
        node = (cfg.get("progress") if cfg is not None and hasattr(cfg, "get") else None) or {}
        interval = float(node.get("min_interval_s", 0.0)) if throttle else 0.0
        kw.setdefault("heartbeat_s", float(node.get("heartbeat_s", 0.0) or 0.0))
        return cls(prefix, total, enabled=bool(node.get("enabled", True)), min_interval_s=interval, **kw)

    def add(self, weight: float) -> None:
        """Grow the planned total by ``weight`` (work found on the way)."""
        self.total += float(weight)

    def elapsed_s(self) -> float:
        """Seconds since the progress started."""
        return self.clock() - self.t0

    def eta_s(self) -> float:
        """Seconds left (NaN before any unit is done): the finished units' rate (s per weight) times the
        weight left, less the seconds spent in the running unit, at least that rate times the weight after
        the running unit (see the module docstring). Does not grow while a unit runs."""
        if self.done <= 0 or self.t_done <= 0:
            return float("nan")
        rate = self.t_done / self.done
        left = max(0.0, self.total - self.done)
        spent = max(0.0, self.elapsed_s() - self.t_done)
        return max(0.0, rate * (left - self.current), rate * left - spent)

    def _finished(self, weight: float) -> None:
        """``weight`` more is done, now: a unit boundary (time between a finished unit and the next one
        counts with the finished work)."""
        self.done += max(0.0, weight)
        self.t_done = self.elapsed_s()

    def begin(self, label: str, weight: float = 1.0) -> None:
        """Unit ``label`` (of ``weight``) starts: the unit before it is done."""
        self._finished(self.current)
        self.current = float(weight)
        self.count += 1
        self.label = label
        self._say(label)
        self._start_heartbeat()

    def advance(self, label: str, weight: float = 1.0) -> None:
        """Unit ``label`` (of ``weight``) is done."""
        self._finished(self.current + float(weight))
        self.current = 0.0
        self.count += 1
        self.label = label
        self._say(label)
        self._start_heartbeat()

    def hook(self, weight: float = 1.0, prefix: str = "") -> Callable[[str], None]:
        """A ``progress(label)`` callable for library code that calls it as each unit starts."""
        return lambda label: self.begin(f"{prefix}{label}", weight)

    def finish(self, label: str = "done") -> None:
        """All work is done: print the total time."""
        self.close()
        self.done, self.current = self.total, 0.0
        self._emit(f"{self.prefix}: {label} in {format_duration(self.elapsed_s())}")

    def beat(self) -> bool:
        """Print the current line marked ``(still running)`` when nothing was printed for ``heartbeat_s``;
        returns whether it printed (the heartbeat thread calls this; tests call it with a fake clock)."""
        if self.heartbeat_s <= 0 or not self.label or self._stop.is_set():
            return False
        now = self.clock()
        if now - self.last_print < self.heartbeat_s:
            return False
        self.last_print = now
        self._emit(self.line(f"{self.label} (still running)"))
        return True

    def close(self) -> None:
        """Stop the heartbeat thread (idempotent; :meth:`finish` calls it)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=1.0)
        _RUNNING.discard(self)

    def _start_heartbeat(self) -> None:
        if (self._thread is not None or self.heartbeat_s <= 0 or not self.enabled or self._stop.is_set()
                or not _ALLOWED.is_set()):
            return
        poll = min(1.0, self.heartbeat_s / 4)

        def run(ref: weakref.ref = weakref.ref(self), stop: threading.Event = self._stop) -> None:
            while not stop.wait(poll):
                me = ref()
                if me is None:
                    return
                me.beat()
                del me

        self._thread = threading.Thread(target=run, name=f"{self.prefix}-heartbeat", daemon=True)
        _RUNNING.add(self)
        self._thread.start()

    def line(self, label: str) -> str:
        """The line for ``label`` at the current state."""
        total = max(self.total, self.done + self.current, 1e-12)
        pct = 100.0 * min(1.0, self.done / total)
        eta = self.eta_s()
        timing = f"{format_duration(self.elapsed_s())} elapsed" + ("" if eta != eta else f", ETA {format_duration(eta)}")
        head = f"{self.prefix}: [{pct:3.0f}%] "
        room = LINE_WIDTH - len(head) - len(timing) - 2
        if len(label) > room:   # the label gives way, never the timing: one line within LINE_WIDTH
            label = label[:max(room - 3, 8)].rstrip() + "..."
        return f"{head}{label}; {timing}"

    def _say(self, label: str) -> None:
        now = self.clock()
        if self.count > 1 and now - self.last_print < self.min_interval_s:
            return
        self.last_print = now
        self._emit(self.line(label))

    def _emit(self, text: str) -> None:
        with self._lock:
            self.lines.append(text)
            if self.enabled:
                print(text, file=self.stream or sys.stderr, flush=True)


def stop_heartbeats() -> None:
    """Stop every running heartbeat (a command's end, also after an error)."""
    for prog in list(_RUNNING):
        prog.close()


@contextlib.contextmanager
def heartbeats() -> Iterator[None]:
    """Allow heartbeat threads while the block runs (a command); stop them all when it ends."""
    _ALLOWED.set()
    try:
        yield
    finally:
        _ALLOWED.clear()
        stop_heartbeats()


@contextlib.contextmanager
def trace_progress(command: str, cfg: Any = None) -> Iterator[None]:
    """While a command runs, tracing many networks missing from the trace cache (a first ``carb-train
    data.path=zoo-cpu``, a zoo screen) prints ``carb-<command>: [p%] tracing <name> at <size> px (i/n, ...);
    elapsed, ETA`` lines (:mod:`carb.design.trace_progress`; the ``progress`` config node's ``enabled`` and
    ``min_interval_s``); a warm cache prints nothing, unless it reads many networks (``reading layer tables: ...
    (i/n, cached)``, :data:`carb.design.trace_progress.MIN_WARM`)."""
    from carb.design.trace_progress import reporting

    with reporting(lambda total: Progress.from_cfg(f"carb-{command}", total, cfg)):
        yield
