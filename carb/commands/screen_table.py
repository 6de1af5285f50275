"""What ``carb-screen`` shows a person: the terminal table (at most 120 characters wide), the column
order of its CSV files, the budget in units and the closing "next" block.

Both the table and the files lead with the knobs, then the decision, the probability of meeting the
budget, the predictions with their intervals and the rank; the files keep every other column after
those. Runtime telemetry that screening fills in (predicted from the architecture, not measured) is
written as ``pred_<feature>``.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from carb.data.schema import RUNTIME_FEATURES
from carb.design.identity import DISPLAY_HEADERS, VARYING_HEADERS, ZOO
from carb.model.encoding import INTERACTION_FEATURES

#: Widest terminal table, in characters.
TABLE_WIDTH = 120
#: Knob columns and their short terminal headers, in order (:data:`carb.design.identity.DISPLAY_HEADERS`).
KNOB_HEADERS = DISPLAY_HEADERS
#: Knob columns the terminal shows only where they tell the shown rows apart (custom grids), and their headers.
VARYING_KNOB_HEADERS = VARYING_HEADERS
#: Knob columns and terminal headers of a named network (zoo rows, :data:`carb.design.identity.ZOO`): the model
#: name leads; its family is implied by the name and shown only where the table has room (:data:`DROP_FIRST`).
ZOO_HEADERS = {ZOO.marker: ZOO.display[ZOO.marker]}
#: Knob columns of the files, in order (the terminal shows the first seven): a named network's model and family
#: first (absent from ResNet frames), then the ResNet knobs.
FILE_KNOBS = (ZOO.marker, ZOO.unit, *KNOB_HEADERS, *VARYING_KNOB_HEADERS, "config_id")
#: Per target: the words and unit of a budget line.
TARGET_WORDS = {"latency_ms": ("latency", "ms"), "energy_J": ("energy", "J"), "peak_memory_MB": ("peak memory", "MB")}
#: Terminal header of each target's prediction column (the report line above says they carry [lo, hi]).
TARGET_HEADERS = {"latency_ms": "latency ms", "energy_J": "energy J", "peak_memory_MB": "memory MB"}
#: Terminal header of a per-image objective.
PER_IMAGE_HEADERS = {"energy_J_per_image": "J/image", "latency_ms_per_image": "ms/image"}
#: Characters of the last `reason` column the table keeps room for before dropping :data:`DROP_FIRST` columns.
REASON_ROOM = 36
#: Columns the terminal table leaves out when it is too wide (the files keep them), in this order; a knob column
#: (``early_ds``) only where all shown rows share its value, so no two rows read the same with different numbers.
#: Then the intervals of targets without a budget go (their point prediction stays), then every interval;
#: a line still too wide (a last `reason` column) is cut.
DROP_FIRST = ("ties", "front", "in_domain", "family", "early_ds")


def budget_text(budget: Mapping[str, float]) -> str:
    """``latency <= 10 ms, peak memory <= 1024 MB per batch``, or ``none``."""
    parts = [f"{TARGET_WORDS.get(t, (t, ''))[0]} <= {v:g} {TARGET_WORDS.get(t, ('', ''))[1]}".rstrip()
             for t, v in budget.items()]
    return ", ".join(parts) + " per batch" if parts else "none"


def num(v: Any, sig: int = 3) -> str:
    """A number for the table: ``sig`` significant digits (``k`` for thousands where the whole number
    would need more digits than ``sig + 1``, ``M`` for millions), ``inf``, ``-`` for a missing value."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return str(v)
    if math.isnan(f):
        return "-"
    if math.isinf(f):
        return "inf" if f > 0 else "-inf"
    a = abs(f)
    if a >= 1e6 or a >= 10 ** (sig + 1):
        scale, unit = (1e6, "M") if a >= 1e6 else (1e3, "k")
        return num(f / scale, sig) + unit
    return f"{f:.0f}" if a >= 100 else f"{f:.{sig}g}"


def _with_interval(df: pd.DataFrame, target: str) -> list[str]:
    p = df[f"pred_{target}"]
    if f"lo_{target}" not in df or f"hi_{target}" not in df:
        return [num(v) for v in p]
    return [f"{num(v)} [{num(lo, 2)},{num(hi, 2)}]" for v, lo, hi in zip(p, df[f"lo_{target}"], df[f"hi_{target}"])]


def format_table(df: pd.DataFrame, preds: Sequence[str], extra: Sequence[str] = (),
                 width: int = TABLE_WIDTH, users: Sequence[str] = ()) -> str:
    """Terminal table of candidates: the knobs, ``decision``, ``P`` (``p_feasible`` in %; ``?`` for an
    ``unverified`` row, whose probability is unknown), each prediction in
    ``preds`` (``pred_<target>`` columns) with its interval ``[lo, hi]`` where the frame has
    ``lo_<target>``/``hi_<target>`` (headed ``latency ms``, ``energy J``, ``memory MB``), ``rank``, then the
    ``extra`` columns present (``pareto`` shown as ``front``, ``pareto_ties`` as ``ties``, ``decision_reason``
    last as ``reason``, cut to the width); ``users``: the user's own columns (e.g. ``top1``, 4 digits), after
    the predictions. Columns of :data:`DROP_FIRST` go when the table is wider than ``width``; the files keep
    everything."""
    show = pd.DataFrame(index=df.index)
    varying = {h for c, h in {**KNOB_HEADERS, **VARYING_KNOB_HEADERS}.items()
               if c in df and df[c].astype(str).nunique() > 1}
    for c, h in ZOO_HEADERS.items():   # a named network's model leads (zoo and combined frames)
        if c in df:
            names = df[c].fillna("").astype(str)
            w = max([len(h), *names.str.len()])
            show[h.ljust(w)] = names.str.ljust(w)   # left-aligned
    for c, h in KNOB_HEADERS.items():
        if c in df:
            show[h] = df[c]
    for c, h in VARYING_KNOB_HEADERS.items():
        if h in varying:
            show[h] = df[c]
    if "decision" in df:
        show["decision"] = df["decision"]
    if "p_feasible" in df:
        unknown = df["decision"].to_numpy(dtype=object) == "unverified" if "decision" in df else np.zeros(len(df), bool)
        show["P"] = ["?" if u else f"{v:.0%}" if np.isfinite(v) else "-"   # ?: unknown (decisions docstring)
                     for v, u in zip(df["p_feasible"].to_numpy(dtype=float), unknown)]
    points: dict[str, tuple[list[str], bool]] = {}   # header -> (point predictions, budgeted)
    for c in preds:
        t = c[len("pred_"):]
        if t in PER_IMAGE_HEADERS:
            show[PER_IMAGE_HEADERS[t]] = [num(v) for v in df[c]]
        else:
            show[TARGET_HEADERS.get(t, t)] = _with_interval(df, t)
            points[TARGET_HEADERS.get(t, t)] = ([num(v) for v in df[c]], f"p_within_{t}" in df)
    for c in users:
        if c in df and c not in ZOO_HEADERS:
            show[c] = [num(v, 4) for v in df[c]]
    if "rank" in df:
        show["rank"] = [num(v) for v in df["rank"]]
    names = {"pareto": "front", "pareto_ties": "ties", "decision_reason": "reason", "profile_score": "score"}
    for c in extra:
        if c in df and c not in ("decision", "p_feasible"):
            v = df[c]
            show[names.get(c, c)] = [num(x, 2) for x in v] if pd.api.types.is_float_dtype(v) else v
    reason = show.pop("reason") if "reason" in show else None
    # leave the reason room for up to REASON_ROOM characters before dropping columns
    room = width - (1 + min(REASON_ROOM, max(map(len, map(str, reason)), default=0)) if reason is not None else 0)
    text = _narrowed(show, room, varying, points)
    if reason is not None:   # last, left-aligned, cut to the width
        lines = text.splitlines()
        text = "\n".join(f"{line} {r}"[:width] for line, r in zip(lines, ["reason", *map(str, reason)]))
    return "\n".join(line[:width] for line in text.splitlines())


def _narrowed(show: pd.DataFrame, room: int, varying: set[str],
              points: Mapping[str, tuple[list[str], bool]]) -> str:
    """``show`` as text no wider than ``room`` where the steps of :data:`DROP_FIRST` get it there: drop its
    columns (a knob in ``varying``, which tells rows apart, stays), then show only the point prediction of
    targets without a budget (``points``: header -> (points, budgeted)), then of every target."""
    def wide(frame: pd.DataFrame) -> bool:
        return max(map(len, frame.to_string(index=False).splitlines()), default=0) > room

    for col in DROP_FIRST:
        if not wide(show):
            break
        if col in show and col not in varying:
            show = show.drop(columns=col)
    for budgeted in (False, True):
        for head, (vals, is_budgeted) in points.items():
            if wide(show) and head in show and is_budgeted == budgeted:
                show[head] = vals
    return show.to_string(index=False)


def predicted_telemetry(columns: Sequence[str]) -> dict[str, str]:
    """``{column: pred_<column>}`` for the runtime telemetry columns (and their products) that screening
    fills in from the architecture rather than measures."""
    return {c: f"pred_{c}" for c in (*RUNTIME_FEATURES, *INTERACTION_FEATURES) if c in columns}


def file_frame(df: pd.DataFrame, targets: Sequence[str], users: Sequence[str] = ()) -> pd.DataFrame:
    """``df`` as the CSV/parquet files hold it: knobs, ``decision``, ``p_feasible``, per target
    ``pred_``/``lo_``/``hi_``/``p_within_``, the per-image objective, the user's columns (``users``, e.g.
    ``top1``), ``rank``, ``profile_rank``, the front and its ties, the flags and reasons, then every other
    column; predicted telemetry renamed ``pred_<feature>``."""
    lead = [c for c in FILE_KNOBS if c in df]
    lead += [c for c in ("decision", "p_feasible") if c in df]
    for t in targets:
        lead += [c for c in (f"pred_{t}", f"lo_{t}", f"hi_{t}", f"p_within_{t}") if c in df]
    lead += [c for c in df.columns if c.endswith("_per_image") and c.startswith("pred_")]
    lead += [c for c in users if c in df]
    lead += [c for c in ("rank", "profile_rank", "pareto", "pareto_ties", "pareto_tied_with", "feasible",
                         "meets_require", "in_domain", "never_measured", "decision_reason", "outside") if c in df]
    lead = list(dict.fromkeys(lead))
    out = df[lead + [c for c in df.columns if c not in lead]]
    return out.rename(columns=predicted_telemetry(out.columns))


def machine_steps(target_uri: str, kind: str | None) -> list[str]:
    """The "next" lines that move a model to another device, per the model's device ``kind`` (``gpu`` /
    ``cpu`` / None): a GPU model cannot be calibrated with this CPU's rows (refused), so it points to the CPU
    reference's calibration and to a zero-shot to another GPU; a CPU model to measuring this CPU."""
    from carb.commands.cli import command_text, wrap_command

    cal = command_text("carb-calibrate")
    if kind == "gpu":
        return [*wrap_command("  this CPU      ", f"{command_text('carb-quickstart')} calibrate=true",
                              "   (calibrates the CPU reference model here)"),
                *wrap_command("  another GPU   ", f"{cal} source={target_uri} k=0 spec=<GPU>")]
    return wrap_command("  your machine  ", f"{cal} source={target_uri} measure=cpu k=12")


def next_steps(target_uri: str, tracking_uri: str, runs_url: str | None = None, kind: str | None = None,
               targets: Sequence[str] | None = None, zoo: bool = False) -> list[str]:
    """The closing "next" block: set your own budget, calibrate to your machine (:func:`machine_steps`, per the
    model's device ``kind``), use the model from Python, open the MLflow UI (``runs_url``: the experiment's runs table in the UI's "Model training" view). The
    commands are typed as this process can run them (:func:`carb.commands.cli.command_text`:
    ``.venv/bin/carb-screen`` when the venv is not on ``PATH``) and wrapped at 120 columns with shell
    continuations (:func:`carb.commands.cli.wrap_command`), so each copy-pastes as printed. ``targets``: what
    the model predicts (the budget line offers only those; None: all three); ``zoo``: a model of named networks
    (its grid, its machine step and its Python call name networks, not ResNet knobs). The screening lines name
    the model (``screen.target``) and, for a zoo model, ``space=zoo``, so they screen what was just screened."""
    from carb.commands.cli import command_text, wrap_command

    screen = command_text("carb-screen")
    units = {"latency_ms": "ms", "energy_J": "J", "peak_memory_MB": "MB"}
    limits = " ".join(f"screen.budget.{t}=<{u}>" for t, u in units.items() if targets is None or t in targets)
    # the model screened, named: the default target is the only champion (ambiguous, or none, in a store of
    # several models) and the default space the ResNet grid, which a zoo model refuses
    screen = f"{screen} space=zoo screen.target={target_uri}" if zoo else f"{screen} screen.target={target_uri}"
    lines = ["next:"]
    lines += wrap_command("  your budget   ", f"{screen} {limits}")
    if zoo:
        lines += wrap_command("  your grid     ", f"{screen} 'space.models=[tv:resnet50,timm:ghostnet_100]'",
                              "   (or space.batch_sizes=[1,8] ...)")
        lines += wrap_command("  your machine  ", f"{command_text('carb-collect')} space=zoo device=cpu measure=cpu "
                              "out=zoo-mine.parquet", "   (then carb-train data.path=zoo-mine.parquet)")
        call = "predict(['tv:resnet50', 'timm:ghostnet_100'], batch_size=8, budget=...)"
    else:
        lines += wrap_command("  your grid     ", f"{screen} screen.grid_file=<csv of knobs>",
                              "   (or space.batch_sizes=[1,8] ...)")
        lines += machine_steps(target_uri, kind)   # per the model's device kind (gpu / cpu)
        call = "predict(knobs_frame, budget=...)"
    lines += wrap_command("  Python        ", f"carb.load_model('{target_uri}').{call}")
    lines += wrap_command("  MLflow UI     ", f"{command_text('mlflow')} ui --backend-store-uri {tracking_uri}",
                          "   (or make ui)")
    return lines + ([f"  then {runs_url}"] if runs_url else [])
