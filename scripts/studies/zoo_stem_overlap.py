"""The input term of the zoo latency model's additive base against the stem that reads the image (issue 43, round 10).

Usage::

    python scripts/studies/zoo_stem_overlap.py [--stems /tmp/zg43/stems.parquet] [--nested] [--groups 4]
    python scripts/studies/zoo_stem_overlap.py --stems /tmp/zg43/stems.parquet --full /tmp/zg43/overlap.json
    python scripts/studies/zoo_stem_overlap.py --hj-wins scripts/data/zoo_bench.json

``mb_input`` (the fp32 input image's MB per image on GPU rows, :func:`carb.model.zoo_latency.input_mb`) is fitted
at 5-8x the cost of a pass over activations: it stands for the stem, a 3-channel convolution of reduction depth
3 x k x k (27 for a 3x3) that re-reads each input pixel k^2 / s^2 times. A patchify stem (ViT, ConvNeXt: kernel =
stride) reads each pixel once as an efficient GEMM. Per (model, input size, graph) of timm's GPU rows this script
reads the cached layer table (:func:`carb.design.trace.trace`, no new trace) and takes the convolutions whose input
has 3 channels: ``stem_reuse`` (the largest kernel area / stride area among them; 0 without one), ``stem_K`` (their
smallest reduction depth), ``stem_flops``. Then, base alone, leave-one-family-out per GPU (families within 20 % /
mean family MAPE % / worst), the shipped base against variants: ``reuse`` (``mb_input`` x max(reuse, 1)),
``overlap`` (``mb_input`` only where the stem overlaps, reuse > 1), ``stemflops`` (the stems' FLOPs a term of their
own, out of ``gflop_conv_regular``), ``stemflops_lowk`` (the same for stems of reduction depth < 64),
``stemout_lowk`` (``mb_input`` replaced by the output MB of stems of reduction depth < 64); and, for RegNetZ's
EvoNorm models, ``noparam`` (no ``mb_elementwise_param`` term; the input term as shipped). ``--nested``: the nested
choice of ``overlap`` (:func:`carb.analysis.zoo_nested.nested_choice`, ``--groups`` folds). Real data: timm's GPU
files joined to the trace table (``with_trace(..., reparam="published")``). ``--full OUT``: the full model with
``overlap`` instead (``scripts/bench/zoo.py --part gpu --devices gpu --table --no-screen --out OUT`` with
:func:`carb.model.zoo_latency.additive_terms` wrapped; needs ``--stems`` written by a run before).
``--hj-wins JSON``: the families of a ``zoo.py --out`` JSON (every device of timm's files) where Hidden Joules'
regression beats CARB, split by CARB's own MAPE (under 10 % or not).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "studies"))
sys.path.insert(0, str(ROOT / "scripts" / "data"))
sys.path.insert(0, str(ROOT / "scripts" / "bench"))

VARIANTS = ("base", "reuse", "overlap", "stemflops", "stemflops_lowk", "stemout_lowk", "noparam")
FAMILIES = ("test", "cait", "fastvit", "hrnet", "volo", "regnetz", "vit", "deit", "efficientnet")


def _stride_area(stride: object) -> float:
    """The area of a convolution's stride (an int or a pair); 1 for anything else."""
    try:
        v = np.atleast_1d(np.asarray(stride, dtype=float))
    except (TypeError, ValueError):
        return 1.0
    return float(v[0] * (v[1] if len(v) > 1 else v[0])) if len(v) else 1.0


def stem_columns(table: pd.DataFrame) -> dict[str, float]:
    """``stem_reuse`` (kernel area / stride area, largest), ``stem_K`` (reduction depth C_in x kh x kw, smallest) and
    ``stem_flops`` / ``stem_out_bytes`` (summed) of the convolutions of one layer table whose input has 3 channels
    (the image); all 0 without one."""
    zero = {"stem_reuse": 0.0, "stem_K": 0.0, "stem_flops": 0.0, "stem_out_bytes": 0.0}
    if "kind" not in table or "flops" not in table:
        return zero
    conv = table[table["kind"].astype(str).str.startswith("conv")]
    c3 = np.array([s is not None and len(tuple(s)) == 4 and int(tuple(s)[1]) == 3 for s in conv["in_shape"]], bool)
    stem = conv[c3]
    if not len(stem):
        return zero
    w = [tuple(int(v) for v in x) for x in stem["weight_shape"]]
    strides = stem["stride"] if "stride" in stem else [1] * len(stem)
    written = stem["bytes_written"] if "bytes_written" in stem else stem["flops"] * 0
    return {"stem_reuse": max(x[2] * x[3] / _stride_area(s) for x, s in zip(w, strides)),
            "stem_K": float(min(int(np.prod(x[1:])) for x in w)), "stem_flops": float(stem["flops"].sum()),
            "stem_out_bytes": float(written.sum())}


def stems(zoo: pd.DataFrame) -> pd.DataFrame:
    """:func:`stem_columns` of every (model, input_size, tr_reparam) of ``zoo`` from the cached layer tables."""
    from zoo_trace_features import OUT, timm_graph

    from carb.design.trace import trace

    done = pd.read_parquet(OUT)
    keys = set(zip(zoo["model"], zoo["input_size"].astype(int), zoo["tr_reparam"].astype(bool)))
    rows = []
    for r in done.itertuples():
        key = (r.model, int(r.input_size), bool(r.reparam))
        if key not in keys:
            continue
        size = int(r.input_size)
        table = trace(timm_graph(r.model), (1, 3, size, size), precision="fp32",
                      settings=json.loads(r.settings) if isinstance(r.settings, str) and r.settings else None,
                      reparam=bool(r.reparam))
        rows.append(dict(zip(("model", "input_size", "tr_reparam"), key)) | stem_columns(table))
    return pd.DataFrame(rows).drop_duplicates(["model", "input_size", "tr_reparam"])


class StemBase:
    """:class:`carb.model.zoo_latency.AdditiveBase` with the shipped GPU settings and one stem ``variant`` of the
    input term (:data:`VARIANTS`); ``predict``: ``latency_ms`` per batch (n,)."""

    def __init__(self, variant: str, settings: dict):
        from carb.model.zoo_latency import AdditiveBase

        variant_of = self

        class _B(AdditiveBase):
            def terms(self, f: pd.DataFrame) -> pd.DataFrame:
                return variant_of.apply(f, super().terms(f))

        self.variant, self.base = variant, _B(**settings)

    def apply(self, f: pd.DataFrame, out: pd.DataFrame) -> pd.DataFrame:
        """The terms ``out`` with this variant's input / stem term."""
        v, reuse, low = self.variant, f["stem_reuse"].to_numpy(float), f["stem_K"].to_numpy(float) < 64
        if v == "reuse":
            out["mb_input"] = out["mb_input"] * np.maximum(reuse, 1.0)
        elif v == "overlap":
            out["mb_input"] = np.where(reuse > 1, out["mb_input"], 0.0)
        elif v in ("stemflops", "stemflops_lowk"):
            g = f["stem_flops"].to_numpy(float) / 1e9 * (low if v == "stemflops_lowk" else 1.0)
            out["gflop_conv_regular"] = np.clip(out["gflop_conv_regular"] - g, 0.0, None)
            out["gflop_stem"] = g
        elif v == "stemout_lowk":
            out["mb_input"] = np.where(low, f["stem_out_bytes"].to_numpy(float) / 1e6, 0.0)
        elif v == "noparam":
            out = out.drop(columns=["mb_elementwise_param"])
        return out

    def fit(self, frame: pd.DataFrame) -> StemBase:
        """Fit on ``frame``'s rows."""
        self.base.fit(frame)
        return self

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        """``latency_ms`` per batch (n,)."""
        return np.exp(self.base.predict_log(frame)) * frame["batch_size"].to_numpy(float)


def family_line(dev: str, v: str, p: pd.DataFrame) -> str:
    """One line of LOFO predictions ``p``: the figures, pooled MAPE, ``test``'s Spearman, the mean signed error of the
    models named ``*_evos`` (EvoNorm) and :data:`FAMILIES`' MAPEs."""
    from zoo_gpu_nested import figures

    signed = (p["pred"] / p["latency_ms"] - 1) * 100
    err = signed.abs() / 100
    fam = err.groupby(p["family"]).mean() * 100
    evos = signed[p["model"].astype(str).str.contains("_evos")].mean()
    rho = {f: g["pred"].corr(g["latency_ms"], method="spearman") for f, g in p.groupby("family")
           if g["model"].nunique() > 2}
    return (f"{dev[:12]:12s} {v:15s} {figures(p)}; pooled {err.mean() * 100:.2f}; test rho "
            f"{rho.get('test', np.nan):.2f}; EvoNorm models {evos:+.0f} % | "
            + " ".join(f"{f} {fam.get(f, np.nan):.1f}" for f in FAMILIES))


def full_overlap(stems_path: Path, out: Path) -> None:
    """``scripts/bench/zoo.py``'s GPU part with ``mb_input`` zeroed on the rows whose stem does not overlap (the
    ``overlap`` variant in the full model: correction and bound on top), figures to ``out``."""
    import runpy

    import carb.model.zoo_latency as zl

    st = pd.read_parquet(stems_path)
    reuse = {(m, int(s), bool(r)): v for m, s, r, v in zip(st["model"], st["input_size"], st["tr_reparam"],
                                                          st["stem_reuse"])}
    shipped = zl.additive_terms

    def wrapped(frame: pd.DataFrame, *args, **kw) -> pd.DataFrame:
        out_ = shipped(frame, *args, **kw)
        if "mb_input" in out_ and len(frame):
            rep = frame["tr_reparam"] if "tr_reparam" in frame else pd.Series(False, index=frame.index)
            r = np.array([reuse.get((m, int(s), bool(g)), 2.0) for m, s, g in
                          zip(frame["model"], frame["input_size"], rep)])
            out_["mb_input"] = np.where(r > 1, out_["mb_input"], 0.0)
        return out_

    zl.additive_terms = wrapped
    sys.argv = ["zoo.py", "--part", "gpu", "--devices", "gpu", "--table", "--no-screen", "--out", str(out)]
    runpy.run_path(str(ROOT / "scripts" / "bench" / "zoo.py"), run_name="__main__")


def hj_wins(path: Path) -> None:
    """Print, per device of a ``scripts/bench/zoo.py --out`` JSON (trace entries), the families where HJ's MAPE is
    below CARB's: how many, those where CARB is under 10 % and those where it is not (CARB / HJ MAPE %)."""
    with open(path) as f:
        entries = [e for e in json.load(f)["gpu"] if e.get("trace", True)]   # timm's files: the i9 and the GPUs
    low = high = 0
    for e in entries:
        wins = [r for r in e["table"] if r["hj_mape_pct"] < r["carb_mape_pct"]]
        lo = [r for r in wins if r["carb_mape_pct"] < 10]
        low, high = low + len(lo), high + len(wins) - len(lo)
        cell = lambda rs: ", ".join(   # noqa: E731
            f"{r['family']} {r['carb_mape_pct']:.1f}/{r['hj_mape_pct']:.1f}"
            for r in sorted(rs, key=lambda r: -r["carb_mape_pct"])) or "none"
        print(f"{e['device']}: HJ wins {len(wins)}/{len(e['table'])}; CARB < 10 %: {cell(lo)}; CARB >= 10 %: "
              f"{cell([r for r in wins if r['carb_mape_pct'] >= 10])}")
    print(f"HJ wins where CARB < 10 %: {low}; where CARB >= 10 %: {high}")


def main() -> None:
    """Print the base-alone LOFO lines of every variant per GPU (and the nested choice of ``overlap``)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--stems", type=Path, default=None, help="a parquet of stem_columns (written when missing)")
    p.add_argument("--nested", action="store_true")
    p.add_argument("--groups", type=int, default=4)
    p.add_argument("--full", type=Path, default=None, metavar="OUT")
    p.add_argument("--hj-wins", type=Path, default=None, metavar="JSON")
    a = p.parse_args()
    if a.hj_wins is not None:
        return hj_wins(a.hj_wins)
    if a.full is not None:
        if a.stems is None or not a.stems.exists():
            print("--full: --stems must name a written parquet (run once without --full)", file=sys.stderr)
            raise SystemExit(2)
        return full_overlap(a.stems, a.full)
    from zoo_gpu_nested import base_settings, figures, lofo

    from carb.analysis.zoo_nested import nested_choice, nested_predictions
    from carb.data.importers.timm_zoo import load_zoo_bench, with_census, with_trace
    from carb.model.zoo_latency import gpu_rows

    zoo = with_trace(with_census(load_zoo_bench()), reparam="published")
    zoo = zoo[gpu_rows(zoo) & zoo["tr_flops"].notna()]
    st = pd.read_parquet(a.stems) if a.stems is not None and a.stems.exists() else stems(zoo)
    if a.stems is not None and not a.stems.exists():
        st.to_parquet(a.stems)
    st["input_size"] = st["input_size"].astype(zoo["input_size"].dtype)
    zoo = zoo.merge(st, on=["model", "input_size", "tr_reparam"], how="left")
    zoo[list(stem_columns(pd.DataFrame()))] = zoo[list(stem_columns(pd.DataFrame()))].fillna(0.0)
    s0 = base_settings([])
    for dev, rows in zoo.groupby("device_name", sort=True):
        rows = rows.reset_index(drop=True)
        for v in VARIANTS:
            print(family_line(str(dev), v, lofo(rows, lambda v=v: StemBase(v, s0))), flush=True)
        if a.nested:
            makes = [lambda: StemBase("base", s0), lambda: StemBase("overlap", s0)]
            chosen = nested_choice(rows, makes, sorted(rows["family"].astype(str).unique()), groups=a.groups)
            preds = [lofo(rows, m).rename(columns={"pred": "pred_carb"}) for m in makes]
            nest = nested_predictions(preds, chosen).rename(columns={"pred_carb": "pred"})
            print(f"{dev}: overlap kept for {sum(chosen.values())}/{len(chosen)} held-out families (test: "
                  f"{chosen.get('test')}); nested {figures(nest)}", flush=True)


if __name__ == "__main__":
    main()
