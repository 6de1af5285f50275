"""Why the 128-wide output-channel tile term over-charges SelecSLS and the small `test` CNNs (issue 43, round zg43d).
Accuracy only.

Usage::

    python scripts/studies/zoo_gpu_tile_rules.py --census [--columns /tmp/zg43d/rules.parquet]
    python scripts/studies/zoo_gpu_tile_rules.py --base [--rules v128,f128g64,...] [--columns ...]
    python scripts/studies/zoo_gpu_tile_rules.py --full OUT --rule f128g64 [--columns ...]

Per convolution of :data:`carb.model.zoo_latency.CONV_PAD_KINDS` with ``c`` output channels per group and ``flops``
(the cached layer tables of the trace table's rows, batch 1, the same rows as ``conv_pad_flops``), a rule gives the
FLOPs computed in vain, ``flops * r(c)``; :data:`RULES`:

- ``v128``: ``ceil(c / 128) * 128 / c - 1`` (the shipped ``conv_tile: 128``; equal to the trace table's column);
- ``f128g<g>``: ``max(128, ceil(c / g) * g) / c - 1``: a narrow convolution still takes a whole 128-wide tile, a wide
  one is rounded to ``g`` (a kernel with ``g``-wide channel tiles for the remainder: 144 -> 192, not 256);
- ``p2g64``: the narrowest of 32 / 64 / 128 that holds ``c``, multiples of 64 beyond (``pow2`` with 64-wide
  remainders: 18 -> 32, 144 -> 192);
- ``v128cap<k>``: ``v128`` with ``r`` at most ``k`` (a narrow convolution's time bounded by its memory traffic);
- ``narrow``: ``v128`` on convolutions with ``c <= 128`` only; ``wide``: on ``c > 128`` only;
- ``split``: ``narrow`` and ``wide`` as two terms, each with its own fitted cost.

Also per row ``nofill``: the part of ``v128``'s FLOPs in convolutions whose pixel dimension ``M = batch x output
pixels`` does not fill one wave of 128-pixel tiles on the largest GPU (188 SMs), where a narrow channel tile cannot be
compensated by more pixel tiles (the "wasted only when the pixel dimension fills its tiles" rule), and the waste split
by ``c`` (<= 32, 33-128, > 128) and by input channels per group (<= 32): ``--census`` prints their family medians.

``--base``: the additive base alone, leave-one-family-out per GPU, with the term off and each rule (scored families
within 20 % / mean family MAPE / worst / pooled), then the nested choice over all four GPUs at once
(:func:`zoo_gpu_tail.nested_tiles`: each held-out family takes the rule with the lowest mean family MAPE summed over
the four GPUs on the *other* scored families). ``--full OUT --rule R``: ``scripts/bench/zoo.py --part gpu --devices
gpu --table --no-screen --out OUT`` with ``conv_tile: 128`` and rule ``R``'s FLOPs in place of the trace table's
``tr_flops_conv_pad128`` (``f128g*``, ``v128cap*``, ``narrow``); compare with ``zoo_gpu_compare.py``.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "bench"))
sys.path.insert(0, str(ROOT / "scripts" / "studies"))
sys.path.insert(0, str(ROOT / "scripts" / "data"))

#: The rules :func:`rule_ratio` knows (see the module docstring).
RULES: tuple[str, ...] = ("v128", "f128g64", "f128g32", "p2g64", "v128cap3", "v128cap1", "narrow", "wide")
#: The largest GPU's SM count among timm's files (RTX PRO 6000 Blackwell Max-Q), for ``nofill``.
SMS_MAX = 188
#: The families :func:`census` shows.
SHOW = ("selecsls", "test", "hrnet", "regnetz", "densenet", "nf", "dla", "ghostnet", "mixnet", "fastvit", "resnet",
        "vgg")


def rule_ratio(c: np.ndarray, rule: str) -> np.ndarray:
    """FLOPs computed in vain per useful FLOP (n,) of convolutions with ``c`` (n,) output channels per group."""
    c128 = np.ceil(c / 128) * 128
    if rule == "p2g64":
        return np.select([c <= 32, c <= 64, c <= 128], [32, 64, 128], np.ceil(c / 64) * 64) / c - 1
    if rule.startswith("f128g"):
        g = int(rule[5:])
        return np.maximum(128, np.ceil(c / g) * g) / c - 1
    r = c128 / c - 1
    if rule.startswith("v128cap"):
        return np.minimum(r, float(rule[7:]))
    if rule == "narrow":
        return np.where(c <= 128, r, 0.0)
    if rule == "wide":
        return np.where(c > 128, r, 0.0)
    if rule == "v128":
        return r
    raise ValueError(f"rule={rule!r} is not allowed; allowed: {', '.join(RULES)}")


def table_columns(table: pd.DataFrame, batch: float) -> dict[str, float]:
    """Per rule ``w_<rule>`` (FLOPs at batch 1) and the census parts of one layer table at timm's ``batch``."""
    from carb.model.zoo_latency import CONV_PAD_KINDS, _out_channels

    conv = table["kind"].isin(CONV_PAD_KINDS).to_numpy()
    g = pd.to_numeric(table["groups"], errors="coerce").fillna(1).to_numpy(float)
    c = np.array([_out_channels(w) for w in table["weight_shape"]], float) / np.maximum(g, 1)
    cin = np.array([float(w[1]) if w is not None and len(w) == 4 else np.nan for w in table["weight_shape"]])
    ok = conv & np.isfinite(c) & (c > 0)
    c = np.where(ok, c, 1.0)
    fl = table["flops"].to_numpy(float)
    px = np.array([float(np.prod(o[2:])) if o is not None and len(o) == 4 else np.nan for o in table["out_shape"]])
    w = np.where(ok, fl * rule_ratio(c, "v128"), 0.0)
    out = {f"w_{r}": float(np.where(ok, fl * rule_ratio(c, r), 0.0).sum()) for r in RULES}
    return out | {"flops_conv": float(fl[ok].sum()), "flops": float(fl.sum()),
                  "nofill": float(w[batch * px < 128 * SMS_MAX].sum()), "c_le32": float(w[c <= 32].sum()),
                  "c_33_128": float(w[(c > 32) & (c <= 128)].sum()), "c_gt128": float(w[c > 128].sum()),
                  "cin_le32": float(w[cin <= 32].sum())}


def rule_columns(zoo: pd.DataFrame, path: Path) -> pd.DataFrame:
    """:func:`table_columns` of every (model, input size, graph) of ``zoo`` (timm's GPU rows), from the cached
    layer tables, cached at ``path``."""
    if path.exists():
        return pd.read_parquet(path)
    from zoo_trace_features import OUT, timm_graph

    from carb.design.trace import trace

    key = zoo.assign(k=zoo["tr_reparam"].fillna(False).astype(bool)).groupby(
        ["model", "input_size", "k"])["batch_size"].min()
    rows = []
    for r in pd.read_parquet(OUT).itertuples():
        k = (r.model, int(r.input_size), bool(r.reparam))
        if k not in key.index or (isinstance(r.refused, str) and r.refused):
            continue
        size = int(r.input_size)
        table = trace(timm_graph(r.model), (1, 3, size, size), precision="fp32",
                      settings=json.loads(r.settings) if isinstance(r.settings, str) and r.settings else None,
                      reparam=bool(r.reparam))
        rows.append(dict(zip(("model", "input_size", "tr_reparam"), k)) | {"family": None}
                    | table_columns(table, float(key[k])))
    out = pd.DataFrame(rows).drop_duplicates(["model", "input_size", "tr_reparam"])
    out["family"] = out["model"].map(zoo.drop_duplicates("model").set_index("model")["family"].astype(str))
    path.parent.mkdir(parents=True, exist_ok=True)
    out.to_parquet(path)
    return out


def joined(zoo: pd.DataFrame, cols: pd.DataFrame) -> pd.DataFrame:
    """``zoo`` with ``cols``' ``w_*`` columns joined on (model, input size, graph)."""
    if "tr_reparam" not in zoo.columns:
        return zoo
    cols = cols.drop(columns="family").assign(input_size=cols["input_size"].astype(zoo["input_size"].dtype))
    key = zoo["tr_reparam"].fillna(False).astype(bool)
    out = zoo.assign(tr_reparam=key).merge(cols, on=["model", "input_size", "tr_reparam"], how="left")
    out.index = zoo.index
    return out.assign(tr_reparam=zoo["tr_reparam"])


def census(cols: pd.DataFrame) -> None:
    """Family medians of the wasted FLOPs at a 128 tile and their parts, as shares of the convolutions' FLOPs."""
    parts = ["w_v128", "c_le32", "c_33_128", "c_gt128", "cin_le32", "nofill"]
    share = cols[parts].div(cols["flops"], axis=0).assign(family=cols["family"])
    med = share.groupby("family")[parts].median()
    print("wasted FLOPs at a 128 tile / the network's FLOPs, family median; its parts by output channels per group c "
          f"and input channels per group; nofill: convolutions with batch x pixels < 128 x {SMS_MAX}")
    print(med.loc[[f for f in SHOW if f in med.index]].round(3).to_string())
    print(f"nofill over all {len(cols)} rows: median {share['nofill'].median():.4f}, max {share['nofill'].max():.4f}"
          f" ({cols.loc[share['nofill'].idxmax(), 'model']})")


class SplitBase:
    """The additive base with ``conv_tile: 128`` whose wasted FLOPs are two terms: ``c <= 128`` (``narrow``) and
    ``c > 128`` (``wide``), each with its own cost; ``predict``: ``latency_ms`` per batch (n,)."""

    def __init__(self, settings: dict):
        from carb.model.zoo_latency import AdditiveBase, gpu_rows

        class _Split(AdditiveBase):
            def terms(self, frame: pd.DataFrame) -> pd.DataFrame:
                out = super().terms(frame)
                wide = np.where(gpu_rows(frame), frame["w_wide"].to_numpy(float) / 1e9, 0.0)
                return out.assign(gflop_conv_pad=out["gflop_conv_pad"] - wide, gflop_conv_pad_wide=wide)

        self.base = _Split(**settings, conv_tile=128)

    def fit(self, frame: pd.DataFrame) -> SplitBase:
        """Fit on ``frame``'s rows."""
        self.base.fit(frame)
        return self

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        """``latency_ms`` per batch (n,)."""
        return np.exp(self.base.predict_log(frame)) * frame["batch_size"].to_numpy(float)


def base(zoo: pd.DataFrame, rules: list[str]) -> None:
    """Print the base-alone LOFO figures per GPU and rule, then the nested choice's."""
    from zoo_gpu_nested import base_settings, lofo
    from zoo_gpu_tail import TileBase, family_mape, nested_tiles, tile_line

    from carb.analysis.zoo_eval import scored_families

    s0 = {k: v for k, v in base_settings([]).items() if k != "conv_tile"}
    mape, preds, scored = {}, {}, {}
    for dev, rows in zoo.groupby("device_name", sort=True):
        rows, dev = rows.reset_index(drop=True), str(dev)
        scored[dev] = scored_families(rows)
        for rule in ["off", *rules]:
            if rule == "off":
                p = lofo(rows, lambda: TileBase(s0, 0))
            elif rule == "split":
                p = lofo(rows, lambda: SplitBase(s0))
            else:
                p = lofo(rows.assign(tr_flops_conv_pad128=rows[f"w_{rule}"]), lambda: TileBase(s0, 128))
            preds[(dev, rule)], mape[(dev, rule)] = p, family_mape(p)
            ref = mape.get((dev, "v128"), mape[(dev, "off")])
            print(tile_line(dev, rule, p, scored[dev], ref).replace(" tile ", " rule ") + " | selecsls "
                  f"{mape[(dev, rule)].get('selecsls', np.nan):.1f}", flush=True)
    chosen = nested_tiles(mape, scored)
    print("nested choice (all four GPUs at once): " + ", ".join(
        f"{r}: {sum(v == r for v in chosen.values())}" for r in ["off", *rules]) + " families", flush=True)


def full(out: Path, rule: str, cols: pd.DataFrame) -> None:
    """``scripts/bench/zoo.py``'s GPU part with ``conv_tile: 128`` priced on rule ``rule``'s FLOPs."""
    import runpy

    import carb.data.importers.timm_zoo as tz

    shipped = tz.with_trace

    def with_rule(frame: pd.DataFrame, *args, **kw) -> pd.DataFrame:
        z = joined(shipped(frame, *args, **kw), cols)
        return z.assign(tr_flops_conv_pad128=z[f"w_{rule}"].where(z["tr_flops_conv_pad128"].notna()))

    tz.with_trace = with_rule
    sys.argv = ["zoo.py", "--part", "gpu", "--devices", "gpu", "--table", "--no-screen", "--out", str(out),
                "--zoo-latency", "conv_tile=128"]
    runpy.run_path(str(ROOT / "scripts" / "bench" / "zoo.py"), run_name="__main__")


def main() -> None:
    """``--census``, ``--base`` or ``--full OUT --rule R``."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--census", action="store_true")
    p.add_argument("--base", action="store_true")
    p.add_argument("--rules", default="v128,f128g64,f128g32,p2g64,v128cap3,v128cap1,narrow,split")
    p.add_argument("--full", type=Path, default=None, metavar="OUT")
    p.add_argument("--rule", default="f128g64")
    p.add_argument("--columns", type=Path, default=Path("/tmp/zg43d/rules.parquet"))
    a = p.parse_args()
    rules = [r for r in a.rules.split(",") if r]
    bad = [r for r in rules if r not in (*RULES, "split")] + [r for r in [a.rule] if r not in RULES]
    if not (a.census or a.base or a.full) or bad:
        print(f"choose --census, --base or --full OUT; --rules: {', '.join((*RULES, 'split'))}; --rule: "
              f"{', '.join(RULES)}"
              + (f" (not {', '.join(bad)})" if bad else ""), file=sys.stderr)
        raise SystemExit(2)
    from zoo_gpu_tail import gpu_zoo

    zoo = gpu_zoo()
    cols = rule_columns(zoo, a.columns)
    if a.census:
        census(cols)
    if a.base:
        base(joined(zoo, cols), rules)
    if a.full is not None:
        full(a.full, a.rule, cols)


if __name__ == "__main__":
    main()
