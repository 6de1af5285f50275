"""Study (issue 44): how hard the K rows' per-precision latency offsets are pulled toward the common one
(``transfer.precision_shrink``), chosen leave-one-target-device-out.

On the three CPUs of the transfer benchmark (``scripts.bench.transfer_pairs.cpu_devices``), each target's
multi-source base (every other CPU's probe zero-shot, ``multi_source_models``) is calibrated with the benchmark's
K rows (``split_k``) for each shrink of ``--grid`` (pseudo-rows; ``auto``: empirical Bayes) and scored on the
target's other rows: latency MAPE % per precision (:func:`cell_table`). Both pairs into a target share one base,
so one pair per target is fitted.

The shrink is then chosen per target WITHOUT its rows (:func:`leave_one_target_out`): the value whose worst
cell (precision and K) over the other targets is lowest; that target is scored at its fold's value. The honest
worst cell is the worst of those held-out scores; the configured value is the one most folds choose. Never
chosen on the target's own scored rows, nor on the K rows alone: leave-one-row-out on 3-4 rows per precision
picks ``inf`` (one common offset) on the Zen 4 and Zen 5, where the precisions' true offsets differ by 0.15 in
log (the Zen 4's fp16).

    python -m scripts.studies.transfer_shrink [--grid 0,0.5,1,2,3,5,10,auto] [--ks 10,12] [--out cells.csv] [--single]

``--single``: the single-source calibration (``transfer.extra_sources: []``; ``transfer.precision_shrink_single``):
every ordered pair's probe zero-shot from its source alone, both pairs into a target in that target's fold.

About 5 minutes on 2 shared cores (the three source cascades, the probe zero-shots and one fit per target, K
and shrink).
"""
from __future__ import annotations

import argparse
import copy
import sys
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd


def mape(y: np.ndarray, p: np.ndarray) -> float:
    """Latency MAPE (%) of predictions ``p`` of measurements ``y`` (both (n,), ms)."""
    return 100.0 * float(np.mean(np.abs(np.asarray(p, float) / np.asarray(y, float) - 1.0)))


def _shrink(v: str) -> float | str:
    """A grid value: ``auto`` or a number of pseudo-rows (>= 0; ``ValueError`` otherwise)."""
    if str(v) == "auto":
        return "auto"
    x = float(v)
    if not x >= 0:
        raise ValueError(v)
    return x


def _k(v: str) -> int:
    """A K value: a whole number of rows >= 1 (``ValueError`` otherwise)."""
    k = int(v)
    if k < 1:
        raise ValueError(v)
    return k


def _values(text: str, flag: str, parse: Callable[[str], Any], allowed: str) -> list:
    """``text``'s comma-separated values, each through ``parse``; a bad one: one line naming ``flag`` and what is
    allowed on stderr, exit 2 (before any fit)."""
    try:
        return [parse(v.strip()) for v in text.split(",")]
    except ValueError:
        print(f"{flag}: {text!r} is not allowed; allowed: {allowed}", file=sys.stderr)
        raise SystemExit(2) from None


def cell_table(grid: list[float | str], ks: list[int], single: bool = False) -> pd.DataFrame:
    """One row per (target device, K, shrink, precision): ``mape_pct`` of the held-out rows, ``n``. ``single``:
    the single-source calibration (``transfer.extra_sources: []``): every ordered pair's own source alone, both
    pairs into a target scored (a ``source_device`` column)."""
    from carb.analysis.transfer import split_k
    from carb.model.intervals import screening_predict
    from scripts.bench.transfer_pairs import cpu_devices, fit_cpu_source, multi_source_models, zero_shot_models

    devices = cpu_devices()
    models = {}   # as the benchmark fits them (latency and peak memory: one cascade, its latency the same; the
    for n, d in devices.items():   # shipped extra-source CPUs with transfer.extra_source_train: fit_cpu_source)
        models[n] = fit_cpu_source(d, [t for t in ("latency_ms", "peak_memory_MB")
                                       if t in d and np.isfinite(d[t].to_numpy(float)).any()])
    single_models = zero_shot_models(models, devices)
    multi = single_models if single else multi_source_models(single_models, devices)
    out = []
    for pair in [p for t in devices for p in multi if p[1] == t][:: 1 if single else 2]:
        target, rows = pair[1], devices[pair[1]]
        for k in ks:
            cal, rest = split_k(rows, k)
            prec = rest["precision"].astype(str).to_numpy()
            y = rest["latency_ms"].to_numpy(float)
            for lam in grid:
                tr = copy.copy(multi[pair])
                tr.precision_shrink, tr.precision_shrink_single = lam, None   # this shrink on either base
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    p = screening_predict(tr.fit(cal), rest)["pred_latency_ms"].to_numpy(float)
                for q in sorted(set(prec)):
                    m = prec == q
                    out.append({"target_device": target, "source_device": pair[0], "k": k, "shrink": str(lam), "precision": q,
                                "n": int(m.sum()), "mape_pct": mape(y[m], p[m])})
            print(f"  {pair[0]} -> {target} K={k}: {len(grid)} shrinks fitted", flush=True)
    return pd.DataFrame(out)


def leave_one_target_out(cells: pd.DataFrame) -> pd.DataFrame:
    """Per target device of ``cells`` (:func:`cell_table`): the shrink whose worst ``mape_pct`` over the OTHER
    targets' cells (every K and precision) is lowest (ties: the first in ``cells``' order), and this target's
    worst cell per K at that shrink (``k<K>_max_mape``). Nothing of the target's own rows enters its choice."""
    order = list(dict.fromkeys(cells["shrink"]))
    out = []
    for t in dict.fromkeys(cells["target_device"]):
        others = cells[cells["target_device"] != t].groupby("shrink")["mape_pct"].max().reindex(order)
        chosen = str(others.idxmin())
        mine = cells[(cells["target_device"] == t) & (cells["shrink"] == chosen)]
        out.append({"target_device": t, "shrink": chosen, "others_max_mape": float(others.min()),
                    **{f"k{k}_max_mape": float(g["mape_pct"].max()) for k, g in mine.groupby("k")}})
    return pd.DataFrame(out)


def main(argv: list[str] | None = None) -> None:
    """The study's command line (``argv``: default ``sys.argv[1:]``); prints the cell table and the folds."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", default="0,0.5,1,2,3,5,10,auto", help="shrinks (pseudo-rows, or auto)")
    ap.add_argument("--ks", default="10,12", help="K values")
    ap.add_argument("--out", default=None, help="write the cell table here (csv)")
    ap.add_argument("--single", action="store_true",
                    help="the single-source calibration (transfer.extra_sources: []): every pair's source alone")
    a = ap.parse_args(argv)
    grid = _values(a.grid, "--grid", _shrink, "comma-separated numbers >= 0 or auto, e.g. 0,0.5,1,auto")
    ks = _values(a.ks, "--ks", _k, "comma-separated whole numbers >= 1, e.g. 10,12")

    cells = cell_table(grid, ks, a.single)
    if a.out:
        cells.to_csv(a.out, index=False)
    wide = cells.pivot_table(index="shrink", columns=["k", "source_device", "target_device", "precision"],
                             values="mape_pct")
    print(wide.round(1).to_string())
    print_folds(leave_one_target_out(cells), "shrink", "transfer_shrink", 1)


def print_folds(folds: pd.DataFrame, key: str, name: str, digits: int) -> None:
    """Print the leave-one-target-out ``folds`` (markdown) and the last line: how often each value of ``key`` was
    chosen and the held-out worst of each ``k*_max_mape`` column (MAPE %, ``digits`` decimals)."""
    from scripts.bench.transfer import markdown

    print(markdown(folds.round(2)))
    ks = [c for c in folds.columns if c.startswith("k") and c.endswith("_max_mape")]
    votes = folds[key].value_counts()
    print(f"{name}: chosen leave-one-target-out {', '.join(f'{s} in {n}' for s, n in votes.items())} of "
          f"{len(folds)} folds; held-out worst " + " ".join(f"{c}={folds[c].max():.{digits}f}" for c in ks), flush=True)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
