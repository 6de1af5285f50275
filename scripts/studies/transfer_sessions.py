"""Study: how much of a CPU target's K-row error is its measuring session (issue 44, s44).

A CPU's speed belongs to the session it was measured in (the host kernel build, the rows' ``driver``). The Zen 4
file holds two: ``linux-6.18.44-fc-v1272`` (2026-12-06, the session of its device probe) and ``fc-v1300``
(2026-12-07). The transfer benchmark (``python -m scripts.bench.transfer_pairs``) draws the Zen 4's K rows and
held-out rows across both. This scores the Zen 4 as the target exactly as the benchmark does (its sources, probe
zero-shots and multi-source base, :func:`~scripts.bench.transfer_pairs.score_pair`, the benchmark's K-row picks and
intervals, :func:`~scripts.bench.transfer_pairs.set_intervals`), with the K rows and the held-out rows drawn

- ``mixed``: from all rows (the benchmark's scoring),
- ``s1`` / ``s2``: both from session 1 / session 2 only,
- ``s1->s2`` / ``s2->s1``: the K rows from one session (its pick), the held-out rows all of the other's,

at K = 10 and the quickstart's K, latency MAPE in % and 90 % interval coverage per precision, the mean over the
benchmark's picks (and the picks' range). The interval bands come from the pairs without the Zen 4 (Zen 5 ->
Xeon, Xeon -> Zen 5; the benchmark's leave-one-target-out band among three CPUs), scored beside at the same K and
pick. Both pairs into the Zen 4 share one multi-source base, so one source (the first CPU) stands for both. The last
line is machine-readable::

    sessions: target=34cc4b132c sessions=fc-v1272:227,fc-v1300:333 k10_worst=mixed:X(bf16),s1:X(..),...
        kq_worst=... k10_session_share=X

``k10_session_share``: 1 - (mean of ``s1`` and ``s2``'s worst K = 10 cell) / ``mixed``'s worst K = 10 cell.

Usage: ``CARB_N_JOBS=1 python -m scripts.studies.transfer_sessions [--picks N] [--target NAME]``
"""
from __future__ import annotations

import argparse
import warnings

import numpy as np
import pandas as pd

TARGETS = ["latency_ms"]
SCENARIOS = ("mixed", "s1", "s2", "s1->s2", "s2->s1")


def sessions(rows: pd.DataFrame, column: str = "driver") -> list[pd.DataFrame]:
    """``rows`` split by measuring session (``column``: the host kernel build), in order of first appearance;
    each part's index reset (what :func:`~carb.analysis.transfer.pick_split` takes)."""
    keys = list(dict.fromkeys(rows[column].astype(str)))
    return [rows[rows[column].astype(str) == s].reset_index(drop=True) for s in keys]


def short_session(name: str) -> str:
    """The session's short name: the last ``-`` part of a driver string (``linux-6.18.44-fc-v1300`` -> ``fc-v1300``
    keeps the last two parts)."""
    parts = str(name).split("-")
    return "-".join(parts[-2:]) if len(parts) >= 2 else str(name)


def scenario_rows(parts: list[pd.DataFrame], rows: pd.DataFrame) -> dict[str, tuple[pd.DataFrame, pd.DataFrame | None]]:
    """Per scenario of :data:`SCENARIOS`: (rows the K rows are picked from, held-out rows where they are another
    session's, else None: the pick's other rows)."""
    a, b = parts[0], parts[1]
    return {"mixed": (rows, None), "s1": (a, None), "s2": (b, None), "s1->s2": (a, b), "s2->s1": (b, a)}


def score_scenario(src: str, dst: str, model, zero, single, rows: pd.DataFrame, held: pd.DataFrame | None,
                   ks: list[int], picks: int) -> tuple[list[dict], list[dict]]:
    """:func:`~scripts.bench.transfer_pairs.score_pair` records and pending errors of the pair ``src -> dst`` for
    each K of ``ks`` and pick ``0..picks-1``; ``held``: another session's held-out rows (None: the pick's rest)."""
    from scripts.bench.transfer_pairs import score_pair

    out, pending = [], []
    for k in ks:
        for pick in range(picks):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                recs, pend = score_pair(model, rows, k, TARGETS, True, zero, single, pick, held_out=held)
            out += [{"source": src, "target_device": dst, **r} for r in recs]
            pending += [{"source": src, "target_device": dst, **q} for q in pend]
    return out, pending


def tag_pending(pending: list[dict], devices: dict[str, pd.DataFrame], repeat: dict) -> list[dict]:
    """``pending`` with what :func:`~scripts.bench.transfer_pairs.set_intervals` reads (as ``pair_table`` tags
    it): ``kind``, ``pair``, ``source_id`` / ``target_id``, the target's ``repeat_rows``."""
    from scripts.bench.transfer_pairs import _identity

    ids = {n: (_identity(d)[1] or n) for n, d in devices.items()}
    return [{**q, "kind": "cpu", "pair": (q["source"], q["target_device"]), "source_id": ids[q["source"]],
             "target_id": ids[q["target_device"]], "repeat_rows": repeat[q["target_device"]]} for q in pending]


def summarize(t: pd.DataFrame) -> pd.DataFrame:
    """Per scenario, K and precision, the calibrated latency MAPE (%) mean over picks with the picks' min / max,
    and the 90 % interval coverage mean (``t``: records with ``scenario``)."""
    c = t[(t.model == "calibrated") & (t.target == "latency_ms")]
    g = c.groupby(["scenario", "k", "precision"], sort=False)
    out = pd.DataFrame({"n": g["n"].mean(), "mape_pct": g["mape_pct"].mean(), "mape_min": g["mape_pct"].min(),
                        "mape_max": g["mape_pct"].max(), "coverage": g["coverage"].mean()})
    return out.round(3).reset_index()


def worst(s: pd.DataFrame, k: int) -> dict[str, tuple[float, str]]:
    """Per scenario, the worst precision's mean MAPE (%) at ``k`` and the precision (``s``: :func:`summarize`)."""
    out = {}
    for sc, f in s[s.k == k].groupby("scenario", sort=False):
        i = f["mape_pct"].idxmax()
        out[str(sc)] = (float(f.at[i, "mape_pct"]), str(f.at[i, "precision"]))
    return out


def last_line(s: pd.DataFrame, dev: str, parts: list[pd.DataFrame], kq: int) -> str:
    """The machine-readable line (module docstring)."""
    w10, wq = worst(s, 10), worst(s, kq)
    within = np.mean([w10[x][0] for x in ("s1", "s2") if x in w10])
    share = 1.0 - within / w10["mixed"][0] if "mixed" in w10 else np.nan
    fmt = lambda w: ",".join(f"{k}:{v:.1f}({p})" for k, (v, p) in w.items())   # noqa: E731
    sess = ",".join(f"{short_session(p['driver'].iloc[0])}:{len(p)}" for p in parts)
    return (f"sessions: target={dev} sessions={sess} k10_worst={fmt(w10)} kq={kq} kq_worst={fmt(wq)} "
            f"k10_session_share={share:.2f}")


def run(target: str, picks: int, ks: list[int]) -> tuple[pd.DataFrame, list[pd.DataFrame], str]:
    """Fit the benchmark's CPU sources and bases, score ``target`` under every scenario and set each scenario's
    intervals; returns (the records with ``scenario``, the target's sessions, its device id)."""
    from scripts.bench.transfer_pairs import (_identity, cpu_devices, fit_cpu_source, measured_repeat_rows,
                                              multi_source_models, set_intervals, zero_shot_models)

    devices = cpu_devices()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        models = {n: fit_cpu_source(d, ["latency_ms", "peak_memory_MB"]) for n, d in devices.items()}
        single = zero_shot_models(models, devices)
        multi = multi_source_models(single, devices)
    repeat = {n: measured_repeat_rows(d) for n, d in devices.items()}
    others = [n for n in devices if n != target]
    band_pending = []   # the pairs without the target: the benchmark's band for its pairs (three CPUs)
    for s in others:
        for d in others:
            if s != d:
                band_pending += score_scenario(s, d, models[s], multi.get((s, d)), single.get((s, d)),
                                               devices[d], None, ks, picks)[1]
    src, rows = others[0], devices[target]
    parts = sessions(rows)
    frames = []
    for name, (pick_from, held) in scenario_rows(parts, rows).items():
        recs, pend = score_scenario(src, target, models[src], multi.get((src, target)), single.get((src, target)),
                                    pick_from, held, ks, picks)
        t = set_intervals(pd.DataFrame(recs), tag_pending(band_pending + pend, devices, repeat))
        frames.append(t.assign(scenario=name))
        print(f"  scored {name}", flush=True)
    return pd.concat(frames, ignore_index=True), parts, str(_identity(rows)[1])


def main() -> None:
    from scripts.bench.transfer_pairs import pick_settings, quickstart_k

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--picks", type=int, default=pick_settings()["picks"], help="K-row picks (the benchmark's)")
    ap.add_argument("--target", default="EPYC Zen 4", help="the target CPU (a name of cpu_devices)")
    a = ap.parse_args()
    kq = quickstart_k()
    t, parts, dev = run(a.target, a.picks, sorted({10, kq}))
    s = summarize(t)
    print(s.to_string(index=False))
    print(last_line(s, dev, parts, kq))


if __name__ == "__main__":
    main()
