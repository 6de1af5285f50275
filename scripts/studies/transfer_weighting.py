"""Study (issue 44): how the multi-source base's sources are weighted after K rows (``transfer.source_weighting``),
chosen leave-one-target-device-out.

On the three CPUs of the transfer benchmark (``scripts.bench.transfer_pairs.cpu_devices``), the sources fitted as the
benchmark fits them (``fit_cpu_source``: the shipped 227-row CPUs with ``transfer.extra_source_train``), each
target's multi-source base (every other CPU's probe zero-shot, ``multi_source_models``) is calibrated with the
benchmark's K rows (``split_k``) under each weighting of ``--weightings`` (``inverse_loo``: one weight per source from
all K rows; ``inverse_loo_precision``: each precision's own K rows; ``equal``), at each offset shrink of ``--shrinks``
(default: ``transfer.precision_shrink`` as configured), and scored on the target's other rows: latency MAPE % per
precision. Each target's variant is the one whose worst cell (precision, K) over the OTHER two targets is lowest
(:func:`scripts.studies.transfer_shrink.leave_one_target_out`), and the target is scored at it; never chosen on the
target's own rows.

    python -m scripts.studies.transfer_weighting [--weightings inverse_loo,inverse_loo_precision,equal]
                                                 [--shrinks 0,1] [--ks 10,12] [--out cells.csv]

A few minutes on 2 shared cores (the three source cascades, the probe zero-shots, one fit per target, K and variant).
"""
from __future__ import annotations

import argparse
import copy
import warnings

import numpy as np
import pandas as pd

from scripts.studies.transfer_shrink import _k, _shrink, _values, leave_one_target_out, mape


def _weighting(v: str) -> str:
    """A ``--weightings`` value: one of ``carb.model.transfer.SOURCE_WEIGHTINGS`` (``ValueError`` otherwise)."""
    from carb.model.transfer import SOURCE_WEIGHTINGS

    if v not in SOURCE_WEIGHTINGS:
        raise ValueError(v)
    return v


def variant_name(weighting: str, shrink: float | str, shrinks: list) -> str:
    """A variant's label: the weighting, with ``@<shrink>`` where more than one shrink is compared."""
    return weighting if len(shrinks) == 1 else f"{weighting}@{shrink}"


def bases() -> tuple[dict[str, pd.DataFrame], dict[str, object]]:
    """The benchmark's CPU devices and, per target device, its multi-source base (one pair's; both pairs into a
    target share it)."""
    from scripts.bench.transfer_pairs import cpu_devices, fit_cpu_source, multi_source_models, zero_shot_models

    devices = cpu_devices()
    models = {n: fit_cpu_source(d, [t for t in ("latency_ms", "peak_memory_MB")
                                    if t in d and np.isfinite(d[t].to_numpy(float)).any()])
              for n, d in devices.items()}
    multi = multi_source_models(zero_shot_models(models, devices), devices)
    out: dict[str, object] = {}
    for (_, t), tr in multi.items():
        out.setdefault(t, tr)
    return devices, out


def cell_table(weightings: list[str], shrinks: list, ks: list[int]) -> pd.DataFrame:
    """One row per (target device, K, variant, precision): held-out latency ``mape_pct`` and ``n``; the variant
    in the ``shrink`` column (what :func:`leave_one_target_out` groups by)."""
    from carb.analysis.transfer import split_k
    from carb.model.intervals import screening_predict

    devices, base = bases()
    out = []
    for target, tr0 in base.items():
        for k in ks:
            cal, rest = split_k(devices[target], k)
            prec, y = rest["precision"].astype(str).to_numpy(), rest["latency_ms"].to_numpy(float)
            for lam in shrinks:
                for how in weightings:
                    tr = copy.copy(tr0)
                    tr.precision_shrink, tr.source_weighting = lam, how
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        p = screening_predict(tr.fit(cal), rest)["pred_latency_ms"].to_numpy(float)
                    for q in sorted(set(prec)):
                        m = prec == q
                        out.append({"target_device": target, "k": k, "shrink": variant_name(how, lam, shrinks),
                                    "precision": q, "n": int(m.sum()), "mape_pct": mape(y[m], p[m])})
            print(f"  -> {target} K={k}: {len(weightings) * len(shrinks)} variants fitted", flush=True)
    return pd.DataFrame(out)


def main(argv: list[str] | None = None) -> None:
    """The study's command line (``argv``: default ``sys.argv[1:]``); prints the cells, the folds, a summary line."""
    from carb.commands.cli import compose
    from carb.model.transfer import SOURCE_WEIGHTINGS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--weightings", default="inverse_loo,inverse_loo_precision,equal", help="source weightings")
    ap.add_argument("--shrinks", default=None, help="offset shrinks (pseudo-rows or auto); default: configured")
    ap.add_argument("--ks", default="10,12", help="K values")
    ap.add_argument("--out", default=None, help="write the cell table here (csv)")
    a = ap.parse_args(argv)
    weightings = _values(a.weightings, "--weightings", _weighting, ", ".join(SOURCE_WEIGHTINGS))
    shrinks = _values(a.shrinks or str(compose("calibrate", []).transfer.precision_shrink), "--shrinks", _shrink,
                      "comma-separated numbers >= 0 or auto, e.g. 0,1,auto")
    ks = _values(a.ks, "--ks", _k, "comma-separated whole numbers >= 1, e.g. 10,12")
    from scripts.bench.transfer import markdown

    cells = cell_table(weightings, shrinks, ks)
    if a.out:
        cells.to_csv(a.out, index=False)
    print(cells.pivot_table(index="shrink", columns=["k", "target_device", "precision"],
                            values="mape_pct").round(1).to_string())
    folds = leave_one_target_out(cells).rename(columns={"shrink": "variant"})
    print(markdown(folds.round(2)))
    votes = folds["variant"].value_counts()
    kcols = [c for c in folds.columns if c.startswith("k") and c.endswith("_max_mape")]
    print(f"transfer_weighting: chosen leave-one-target-out {', '.join(f'{s} in {n}' for s, n in votes.items())} "
          f"of {len(folds)} folds; held-out worst " + " ".join(f"{c}={folds[c].max():.1f}" for c in kcols),
          flush=True)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
