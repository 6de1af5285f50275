"""Study (issue 44, k44c): how a precision's K rows are weighted in its latency offset
(``transfer.offset_weighting``: equal, inverse_variance, huber), chosen leave-one-target-device-out, and which K rows
make a bad pick.

From a transfer benchmark's saved fits (``python -m scripts.bench.transfer_pairs --parts-out FILE``), per CPU target
device (one pair per target: both pairs into a target share the multi-source base), K (``--ks``) and K-row pick
(``benchmark.picks``, :func:`carb.analysis.transfer.pick_split`): the K rows' log offsets on the fitted base
(``d = log measured - log base``), each rule's per-precision offsets (:func:`carb.model.transfer._precision_offsets`
with the fit's shrink, the rows' run-to-run variance :func:`carb.model.transfer.row_noise_var` as ``fit`` takes
it), and the held-out rows' latency MAPE % per precision with those offsets (the base and the source weights are the
saved fit's: only the offsets change, so ``log(measured / predicted)`` moves by the old offset minus the new).

The rule is chosen per target WITHOUT its rows (:func:`scripts.studies.transfer_shrink.leave_one_target_out`: the
rule whose worst cell, precision and K, mean over the picks, over the OTHER targets is lowest; ties: the first of
``--rules``, the current default) and the target is scored at its fold's rule.

``--rows TARGET`` prints, per pick at K = 10, every K row of that target: precision, config, ``d`` minus the
precision's exact offset (the held-out rows' mean log ratio to the base), its measured two-pass spread (NaN: one
pass) and the held-out MAPE per precision.

    python -m scripts.studies.transfer_robust --parts-in FILE [--rules equal,inverse_variance,huber] [--ks 10,12]
        [--rows "EPYC Zen 4"] [--out cells.csv]

Seconds (the K rows are predicted through the saved fits; nothing is refitted).
"""
from __future__ import annotations

import argparse
import copy
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

RULES = ("equal", "inverse_variance", "huber")


def mape(err: np.ndarray) -> float:
    """Latency MAPE (%) of predictions whose log error ``err = log(measured / predicted)`` (n,)."""
    return 100.0 * float(np.mean(np.abs(np.expm1(-np.asarray(err, float)))))


def k_row_cells(parts: list, ks: list[int]) -> list[dict[str, Any]]:
    """One record per CPU target device, K and pick of the saved fits ``parts`` (``--parts-out``): the K rows
    (``cal``), their log offsets on the fit's base ``d`` (K,), precisions ``prec``, the fit's offsets, held-out log
    errors ``err`` and precisions ``hprec``, and the fitted model."""
    from carb.analysis.transfer import pick_split
    from carb.model.intervals import screening_predict
    from scripts.bench.transfer_pairs import cpu_devices, pick_settings

    dev, ps, seen, out = cpu_devices(), pick_settings(), set(), []
    for q in [q for p in parts for q in p[1]]:
        key = (q["target_device"], q["k"], q["pick"])
        if q.get("kind") != "cpu" or q["target"] != "latency_ms" or q["k"] not in ks or key in seen \
                or q.get("name") != "calibrated":
            continue
        seen.add(key)
        m, info = q["model"], q["model"].transfer_["latency_ms"]
        if "a_precision" not in info:
            continue
        cal, _ = pick_split(dev[q["target_device"]], q["k"], q["pick"], ps["pool_fraction"], ps["seed"])
        if list(cal["config_id"]) != list(m.calibration_rows_):
            raise SystemExit(f"--parts-in: the saved fit of {key} was not made on this pick's rows; re-run "
                             "python -m scripts.bench.transfer_pairs --parts-out FILE on this checkout")
        prec = cal["precision"].astype(str).to_numpy()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pred = screening_predict(m, cal)["pred_latency_ms"].to_numpy(float)
        off = np.array([info["a_precision"][p] for p in prec])
        out.append({"target_device": q["target_device"], "k": q["k"], "pick": q["pick"], "cal": cal, "prec": prec,
                    "d": np.log(cal["latency_ms"].to_numpy(float)) - np.log(pred) + off,
                    "offsets": dict(info["a_precision"]), "err": np.asarray(q["err"], float),
                    "hprec": np.asarray(q["precision"]).astype(str), "model": m})
    return out


def rule_offsets(c: dict[str, Any], rule: str) -> dict[str, float]:
    """The per-precision latency offsets of record ``c`` (:func:`k_row_cells`) under ``rule``, with the fit's own
    shrink and the K rows' noise variance as :meth:`TransferredCascade.fit` computes it."""
    from carb.model.transfer import _precision_offsets

    m = copy.copy(c["model"])
    m.offset_weighting = rule
    nv = m._offset_noise_var(c["cal"])
    return _precision_offsets(c["d"], c["prec"], m.shrink(), rule, nv)[1]


def cell_table(cells: list[dict[str, Any]], rules: list[str]) -> pd.DataFrame:
    """One row per (target device, K, pick, rule, precision): held-out ``mape_pct`` and ``n``."""
    out = []
    for c in cells:
        for rule in rules:
            new = rule_offsets(c, rule)
            for p in sorted(set(c["hprec"])):
                m = c["hprec"] == p
                e = c["err"][m] + c["offsets"][p] - new.get(p, np.mean(list(new.values())))
                out.append({"target_device": c["target_device"], "k": c["k"], "pick": c["pick"], "shrink": rule,
                            "precision": p, "n": int(m.sum()), "mape_pct": mape(e)})
    return pd.DataFrame(out)


def print_rows(cells: list[dict[str, Any]], target: str, k: int = 10) -> None:
    """The K rows of ``target`` per pick at ``k`` (see the module docstring)."""
    from carb.data.repeatability import SPREAD

    for c in [c for c in cells if c["target_device"] == target and c["k"] == k]:
        print(f"{target} K={k} pick {c['pick']}: offsets " +
              ", ".join(f"{p} {v:+.3f}" for p, v in sorted(c["offsets"].items())))
        for p in sorted(set(c["hprec"])):
            m = c["hprec"] == p
            exact = float(np.mean(c["err"][m])) + c["offsets"][p]
            print(f"  {p}: held-out {int(m.sum())} rows, MAPE {mape(c['err'][m]):.1f} % (at the exact offset "
                  f"{exact:+.3f}: {mape(c['err'][m] - np.mean(c['err'][m])):.1f} %)")
            for i in np.flatnonzero(c["prec"] == p):
                r = c["cal"].iloc[i]
                sp = float(r[SPREAD]) if SPREAD in r.index else float("nan")
                print(f"    {r['config_id']} depth {r['depth']} width {r['width_mult']} batch {r['batch_size']} "
                      f"input {r['input_size']}: d - exact {c['d'][i] - exact:+.3f}, two-pass spread {sp:.3f}")


def main(argv: list[str] | None = None) -> None:
    """The study's command line (``argv``: default ``sys.argv[1:]``)."""
    import cloudpickle

    from scripts.studies.transfer_shrink import leave_one_target_out, print_folds

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts-in", required=True, help="python -m scripts.bench.transfer_pairs --parts-out FILE")
    ap.add_argument("--rules", default=",".join(RULES), help="offset weightings (the first: the default)")
    ap.add_argument("--ks", default="10,12", help="K values")
    ap.add_argument("--rows", default=None, help="print this target device's K rows per pick at K = 10")
    ap.add_argument("--out", default=None, help="write the cell table here (csv)")
    a = ap.parse_args(argv)
    rules = [r.strip() for r in a.rules.split(",")]
    if not rules or any(r not in RULES for r in rules):
        print(f"--rules: {a.rules!r} is not allowed; allowed: comma-separated of {', '.join(RULES)}", file=sys.stderr)
        raise SystemExit(2)
    try:
        ks = [int(v) for v in a.ks.split(",")]
    except ValueError:
        print(f"--ks: {a.ks!r} is not allowed; allowed: comma-separated whole numbers >= 1, e.g. 10,12",
              file=sys.stderr)
        raise SystemExit(2) from None
    if not Path(a.parts_in).is_file():
        print(f"--parts-in: {a.parts_in!r} is not a file; allowed: a file of python -m scripts.bench.transfer_pairs "
              "--parts-out FILE", file=sys.stderr)
        raise SystemExit(2)
    cells = k_row_cells(cloudpickle.loads(Path(a.parts_in).read_bytes()), ks)
    if a.rows:
        print_rows(cells, a.rows)
    t = cell_table(cells, rules)
    if a.out:
        t.to_csv(a.out, index=False)
    picks = t.groupby(["shrink", "target_device", "k", "precision"], sort=False)["mape_pct"]
    print(picks.mean().unstack(["target_device", "precision"]).round(2).to_string())
    print(t[t["k"] == 10].pivot_table(index=["target_device", "precision", "shrink"], columns="pick",
                                      values="mape_pct").round(1).to_string())
    mean = picks.mean().reset_index()
    folds = leave_one_target_out(mean).rename(columns={"shrink": "offset_weighting"})
    print_folds(folds, "offset_weighting", "transfer_robust", 2)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
