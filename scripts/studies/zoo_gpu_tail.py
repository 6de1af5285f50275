"""The GPU families of timm's files still over 20 % and the lowest Spearman (issue 43, round zg43c). Accuracy only.

Usage::

    python scripts/studies/zoo_gpu_tail.py --diagnose [--out /tmp/zg43c/tail.parquet]
    python scripts/studies/zoo_gpu_tail.py --noise [--bench scripts/data/zoo_bench.json]
    python scripts/studies/zoo_gpu_tail.py --tiles [--columns /tmp/zg43c/pad.parquet]
    python scripts/studies/zoo_gpu_tail.py --full OUT --conv-tile 128 [--columns /tmp/zg43c/pad.parquet]

``--diagnose``: per GPU of timm's files and each family over 20 % there in the shipped benchmark (:data:`TAIL`), the
full model's leave-one-family-out prediction of every row (:class:`carb.model.zoo_latency.ZooLatencyModel` with
``conf/zoo_latency/default.yaml``'s GPU settings, fitted on every other family's rows: the benchmark's own split;
only the tail families are held out, so this is a subset of ``scripts/bench/zoo.py --part gpu``'s predictions),
with its parts (the additive base, the base times the correction, Hidden Joules' regression: log errors in %) and
the base's three largest terms (share of the base's predicted time). ``--out``: the rows as a parquet.
``--noise``: whether a family's low Spearman is consistent with timm's timing noise. timm's files have no repeats, but
they time architectures twice under different names (``deit_base_patch16_224`` and ``vit_base_patch16_224``: the
same layer table); the log ratio of two such rows is measurement noise, so its spread over the pairs of a file is
``sqrt(2)`` times the noise of one row. Per family with a Spearman below 0.90 in the benchmark JSON: its rows' measured
latencies, the simulated Spearman of a perfect predictor against them with that noise (and with the device's
pooled LOFO log error), median and 5 % quantile over 2,000 draws.
``--tiles``: the additive base alone, leave-one-family-out per GPU, with ``conv_tile`` off and at each of
:data:`carb.model.zoo_latency.CONV_TILES` (the ``flops_conv_pad<tile>`` columns of
:func:`carb.model.zoo_latency.conv_pad_flops`, computed from the cached layer tables into ``--columns``, written on the
first run: the shipped trace table does not have them yet), then the nested choice over all four GPUs at once: each
held-out family takes the setting whose mean family MAPE, summed over the four GPUs, is lowest on the *other* scored
families (its own rows never in its choice). ``--full OUT``: ``scripts/bench/zoo.py --part gpu --devices gpu --table
--no-screen --out OUT --zoo-latency conv_tile=<--conv-tile>`` with those columns joined to timm's rows.
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

#: The families over 20 % in the shipped benchmark (``scripts/data/zoo_bench.json``), per GPU.
TAIL: dict[str, tuple[str, ...]] = {"RTX 3090": ("cait", "fastvit"), "RTX 4090": ("hrnet", "test"),
                                    "RTX 5090": (), "RTX PRO 6000 Blackwell Max-Q": ("test", "volo", "regnetz")}
#: The layer-table columns shown per row.
SHOW = ("tr_n_ops", "tr_flops")


def gpu_zoo() -> pd.DataFrame:
    """timm's GPU rows with the census and the layer table (published graph), the benchmark's usable rows."""
    from carb.analysis.zoo_eval import usable_rows
    from carb.data.importers.timm_zoo import load_zoo_bench, with_census, with_trace

    zoo = with_trace(with_census(load_zoo_bench()), reparam="published")
    return usable_rows(zoo[zoo["device_kind"] == "gpu"])


def model_settings(device_kind: str = "gpu") -> dict:
    """``conf/zoo_latency/default.yaml``'s settings for ``device_kind`` (as ``scripts/bench/zoo.py`` reads them)."""
    from zoo import zoo_latency_settings

    return zoo_latency_settings([], device_kind=device_kind)


def held_out(rows: pd.DataFrame, family: str, settings: dict) -> pd.DataFrame:
    """``family``'s rows of one device with the LOFO fit's parts (log time per image: ``base``, ``corrected``,
    ``hj``, ``final``) and the base's term shares (``share_<term>``, of the base's predicted time)."""
    from carb.model.zoo_latency import ZooLatencyModel

    at = (rows["family"].astype(str) == family).to_numpy()
    m = ZooLatencyModel(**settings).fit(rows[~at])
    test = rows[at].copy()
    c = m.components(test)
    test[["base", "corrected", "hj"]] = c[["base", "corrected", "hj"]].to_numpy(float)
    test["final"] = m.predict_log(test)
    if m.tbase_ is not None and hasattr(m.tbase_, "costs"):
        terms = m.tbase_.terms(test)
        cost = terms * pd.Series(m.tbase_.costs())[terms.columns]
        share = cost.div(cost.sum(axis=1), axis=0)
        test[[f"share_{k}" for k in share.columns]] = share.to_numpy(float)
        test["input_bytes_kept"] = bool(m.input_bytes_)
    return test


def err_pct(log_pred: pd.Series, frame: pd.DataFrame) -> pd.Series:
    """Signed error % of a log time per image against ``latency_ms / batch_size``."""
    return (np.exp(log_pred) / (frame["latency_ms"] / frame["batch_size"]) - 1) * 100


def diagnose(out: Path | None) -> None:
    """Print per GPU and tail family every row's errors (base, corrected, HJ, final) and the base's top terms."""
    zoo, frames = gpu_zoo(), []
    settings = model_settings()
    for dev, fams in TAIL.items():
        rows = zoo[zoo["device_name"] == dev].reset_index(drop=True)
        for fam in fams:
            t = held_out(rows, fam, settings)
            e = {k: err_pct(t[k], t) for k in ("base", "corrected", "hj", "final")}
            print(f"\n{dev} / {fam}: {len(t)} rows; MAPE % base {e['base'].abs().mean():.1f}, corrected "
                  f"{e['corrected'].abs().mean():.1f}, HJ {e['hj'].abs().mean():.1f}, final "
                  f"{e['final'].abs().mean():.1f}; Spearman final "
                  f"{np.exp(t['final']).corr(t['latency_ms'] / t['batch_size'], method='spearman'):.2f}; "
                  f"input term kept: {t.get('input_bytes_kept', pd.Series([None])).iloc[0]}")
            shares = [c for c in t.columns if c.startswith("share_")]
            for i, r in t.sort_values("final").iterrows():
                top = r[shares].astype(float).nlargest(3)
                print(f"  {r['model'][:34]:34s} {int(r['input_size']):4d} b{int(r['batch_size']):5d} "
                      f"{r['latency_ms'] / r['batch_size'] * 1e3:8.1f} us/img ops {int(r['tr_n_ops']):5d} "
                      f"GF {r['tr_flops'] / 1e9:6.2f} | base {e['base'][i]:+5.0f} corr {e['corrected'][i]:+5.0f} "
                      f"hj {e['hj'][i]:+5.0f} final {e['final'][i]:+5.0f} | "
                      + " ".join(f"{k[6:]} {v:.2f}" for k, v in top.items()), flush=True)
            frames.append(t.assign(device_name=dev))
    if out is not None:
        keep = ["device_name", "family", "model", "input_size", "batch_size", "latency_ms", "base", "corrected",
                "hj", "final", *SHOW]
        pd.concat(frames)[keep].to_parquet(out)


def all_predictions(path: Path) -> pd.DataFrame:
    """Every scored family's LOFO prediction of CARB on every device of timm's files, as the benchmark makes it
    (:func:`carb.analysis.zoo_eval.lofo_predictions` with the device kind's settings, then
    :func:`carb.analysis.zoo_eval.nested_margin` where those settings ask for it: the i9), cached at ``path``
    (written on the first run): ``pred_carb`` (latency_ms per batch) beside the rows' keys."""
    if path.exists():
        return pd.read_parquet(path)
    from carb.analysis.zoo_eval import bound_settings, lofo_predictions, nested_margin, scored_families, usable_rows
    from carb.data.importers.timm_zoo import load_zoo_bench, with_census, with_trace
    from carb.model.zoo_latency import ZooLatencyModel

    zoo, out = usable_rows(with_trace(with_census(load_zoo_bench()), reparam="published")), []
    for dev, rows in zoo.groupby("device_name", sort=True):
        rows = rows.reset_index(drop=True)
        settings = model_settings(str(rows["device_kind"].iloc[0]))
        pred = lofo_predictions(rows, scored_families(rows), {"carb": lambda: ZooLatencyModel(**settings)})
        nested, outside = bound_settings(settings)
        if nested:
            pred, _ = nested_margin(pred, outside=outside)
        out.append(pred[["device_name", "family", "model", "input_size", "batch_size", "latency_ms", "pred_carb"]])
        print(f"  {dev}: {pred['family'].nunique()} families predicted", file=sys.stderr, flush=True)
    pred = pd.concat(out, ignore_index=True)
    pred.to_parquet(path)
    return pred


def twin_noise() -> pd.DataFrame:
    """Per device: timm's timing noise of one row (log units), from the rows of different model names with the same
    layer table (same input size, batch, parameters, FLOPs, operation count and bytes: one architecture timed
    twice): ``pairs`` (groups), ``noise_sd`` (root mean square of the groups' sample standard deviations)."""
    from carb.data.importers.timm_zoo import load_zoo_bench, with_trace

    zoo = with_trace(load_zoo_bench(), reparam="published")
    zoo = zoo[zoo["tr_flops"].notna()]
    key = ["device_name", "input_size", "batch_size", "params", "tr_flops", "tr_n_ops", "tr_bytes_read"]
    sd = (zoo.assign(log=np.log(zoo["latency_ms"])).groupby(key).filter(lambda g: g["model"].nunique() > 1)
          .groupby(key)["log"].std())
    return sd.groupby(level=0).agg(pairs="size", noise_sd=lambda s: float(np.sqrt((s ** 2).mean())))


def simulated_rho(y_log: np.ndarray, sd: float, draws: int = 2000, seed: int = 0) -> tuple[float, float]:
    """Median and 5 % quantile of Spearman's rho between ``y_log`` (n,) and ``y_log`` plus independent normal errors
    of ``sd`` (log units), over ``draws`` draws: what a predictor whose only error is that scatter reaches."""
    from carb.analysis.zoo_eval import spearman

    rng = np.random.default_rng(seed)
    rho = [spearman(y_log + rng.normal(0, sd, len(y_log)), y_log) for _ in range(draws)]
    return float(np.median(rho)), float(np.quantile(rho, 0.05))


def noise(bench: Path, preds: Path) -> None:
    """Print per device the timing noise (:func:`twin_noise`) and the within-family scatter of CARB's LOFO log errors
    (each family's errors less their mean, pooled), then per family with CARB's Spearman < 0.90 in ``bench``: its
    rows and batch sizes, the observed rho of the latency per batch (the benchmark's) and per image, and
    :func:`simulated_rho` (of the latency per batch, as the benchmark ranks it) under the timing noise and under
    the device's within-family scatter."""
    from carb.analysis.zoo_eval import spearman

    tn, pred = twin_noise(), all_predictions(preds)
    pred["err"] = np.log(pred["pred_carb"] / pred["latency_ms"])
    with open(bench) as f:
        entries = [e for e in json.load(f)["gpu"] if e.get("trace", True)]
    for e in entries:
        dev = e["device"]
        p = pred[pred["device_name"] == dev]
        scatter = float(np.sqrt(((p["err"] - p.groupby("family")["err"].transform("mean")) ** 2).mean()))
        t = tn.loc[dev] if dev in tn.index else pd.Series({"pairs": 0, "noise_sd": np.nan})
        print(f"{dev}: timing noise {100 * t['noise_sd']:.2f} % ({int(t['pairs'])} twin groups); within-family "
              f"scatter of the LOFO log errors {100 * scatter:.1f} %")
        for r in sorted((r for r in e["table"] if r["carb_rho"] < 0.9), key=lambda r: r["carb_rho"]):
            g = p[p["family"] == r["family"]]
            y, b = np.log(g["latency_ms"]).to_numpy(float), g["batch_size"].to_numpy(float)
            per_batch = spearman(g["pred_carb"].to_numpy(float), g["latency_ms"].to_numpy(float))
            per_image = spearman(g["pred_carb"].to_numpy(float) / b, g["latency_ms"].to_numpy(float) / b)
            own = float(np.sqrt(((g["err"] - g["err"].mean()) ** 2).mean()))
            n_med, n_q = simulated_rho(y, float(t["noise_sd"])) if np.isfinite(t["noise_sd"]) else (np.nan,) * 2
            s_med, s_q = simulated_rho(y, scatter)
            print(f"  {r['family']:12s} {len(g):3d} rows, batches {sorted(set(b.astype(int)))}, log range per "
                  f"batch {np.ptp(y):.2f}; rho {r['carb_rho']:.2f} (recomputed {per_batch:.2f}, per image "
                  f"{per_image:.2f}); own scatter {100 * own:.1f} %; timing noise alone: median {n_med:.2f}, 5 % "
                  f"{n_q:.2f}; device scatter: median {s_med:.2f}, 5 % {s_q:.2f}", flush=True)


def pad_columns(path: Path) -> pd.DataFrame:
    """:func:`carb.model.zoo_latency.conv_pad_flops` (as ``tr_flops_conv_pad<tile>``) of every (model, input size,
    graph) of the trace table, from the cached layer tables (no new trace), cached at ``path``."""
    if path.exists():
        return pd.read_parquet(path)
    sys.path.insert(0, str(ROOT / "scripts" / "data"))
    from zoo_trace_features import OUT, timm_graph

    from carb.design.trace import trace
    from carb.model.zoo_latency import conv_pad_flops

    rows = []
    for r in pd.read_parquet(OUT).itertuples():
        if isinstance(r.refused, str) and r.refused:
            continue
        size = int(r.input_size)
        table = trace(timm_graph(r.model), (1, 3, size, size), precision="fp32",
                      settings=json.loads(r.settings) if isinstance(r.settings, str) and r.settings else None,
                      reparam=bool(r.reparam))
        rows.append({"model": r.model, "input_size": size, "reparam": bool(r.reparam)}
                    | {f"tr_{k}": v for k, v in conv_pad_flops(table).items()})
    out = pd.DataFrame(rows).drop_duplicates(["model", "input_size", "reparam"])
    out.to_parquet(path)
    return out


def with_pad(zoo: pd.DataFrame, pad: pd.DataFrame) -> pd.DataFrame:
    """``zoo`` (rows with ``tr_reparam``) with the ``tr_flops_conv_pad<tile>`` columns of ``pad`` joined on (model,
    input size, graph); NaN where the trace table has no row (the row is then untraced for the term too)."""
    pad = pad.rename(columns={"reparam": "tr_reparam"})
    pad["input_size"] = pad["input_size"].astype(zoo["input_size"].dtype)
    cols = [c for c in pad.columns if c.startswith("tr_flops_conv_pad")]
    zoo = zoo.drop(columns=[c for c in cols if c in zoo.columns])
    if "tr_reparam" not in zoo.columns:
        return zoo
    keyed = zoo["tr_reparam"].fillna(False).astype(bool)
    out = zoo.assign(tr_reparam=keyed).merge(pad, on=["model", "input_size", "tr_reparam"], how="left")
    out.index = zoo.index
    return out.assign(tr_reparam=zoo["tr_reparam"])


class TileBase:
    """:class:`carb.model.zoo_latency.AdditiveBase` with the shipped GPU settings and ``conv_tile``; ``predict``:
    ``latency_ms`` per batch (n,)."""

    def __init__(self, settings: dict, conv_tile: int):
        from carb.model.zoo_latency import AdditiveBase

        self.base = AdditiveBase(**settings, conv_tile=conv_tile)

    def fit(self, frame: pd.DataFrame) -> TileBase:
        """Fit on ``frame``'s rows."""
        self.base.fit(frame)
        return self

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        """``latency_ms`` per batch (n,)."""
        return np.exp(self.base.predict_log(frame)) * frame["batch_size"].to_numpy(float)


def family_mape(p: pd.DataFrame) -> pd.Series:
    """MAPE % per family of LOFO predictions ``p`` (``pred``, ``latency_ms``)."""
    return (p["pred"] / p["latency_ms"] - 1).abs().groupby(p["family"]).mean() * 100


def nested_tiles(mape: dict[tuple[str, int], pd.Series], scored: dict[str, list[str]]) -> dict[str, int]:
    """Per family (scored on any GPU), the tile whose mean family MAPE over the *other* scored families, summed over
    the GPUs, is lowest (``mape``: (GPU, tile) -> MAPE % per family; ``scored``: GPU -> its scored families)."""
    tiles = list(dict.fromkeys(t for _, t in mape))   # in the order given (0 first)
    fams = sorted({f for v in scored.values() for f in v})
    out = {}
    for f in fams:
        score = [sum(mape[(d, t)][[g for g in s if g != f]].mean() for d, s in scored.items()) for t in tiles]
        out[f] = tiles[int(np.argmin(score))]
    return out


def tiles(columns: Path) -> None:
    """Print, per GPU and tile, the base-alone LOFO figures (scored families within 20 %, mean family MAPE %, worst,
    pooled MAPE %, the tail families), then the nested choice's."""
    from zoo_gpu_nested import base_settings, lofo

    from carb.analysis.zoo_eval import scored_families
    from carb.model.zoo_latency import CONV_TILES

    zoo = with_pad(gpu_zoo(), pad_columns(columns))
    s0 = {k: v for k, v in base_settings([]).items() if k != "conv_tile"}
    mape, preds, scored = {}, {}, {}
    for dev, rows in zoo.groupby("device_name", sort=True):
        rows = rows.reset_index(drop=True)
        scored[str(dev)] = scored_families(rows)
        for t in (0, *CONV_TILES):
            p = lofo(rows, lambda t=t: TileBase(s0, t))
            preds[(str(dev), t)], mape[(str(dev), t)] = p, family_mape(p)
            print(tile_line(str(dev), str(t), p, scored[str(dev)], mape[(str(dev), 0)]), flush=True)
    chosen = nested_tiles(mape, scored)
    print("nested choice (all four GPUs at once): " + ", ".join(
        f"{t}: {sum(v == t for v in chosen.values())}" for t in (0, *CONV_TILES)) + " families", flush=True)
    for dev in scored:
        p = pd.concat([preds[(dev, chosen.get(f, 0))][lambda q, f=f: q["family"] == f]
                       for f in preds[(dev, 0)]["family"].unique()])
        print(tile_line(dev, "nested", p, scored[dev], mape[(dev, 0)]), flush=True)


def tile_line(dev: str, label: str, p: pd.DataFrame, scored: list[str], before: pd.Series) -> str:
    """One line of figures of LOFO predictions ``p`` over the ``scored`` families, and the families that cross 20 %
    against ``before`` (MAPE % per family)."""
    fam = family_mape(p)[scored]
    pooled = (p["pred"] / p["latency_ms"] - 1).abs()[p["family"].isin(scored)].mean() * 100
    cross = " ".join(f"{f} {before[f]:.1f}->{fam[f]:.1f}" for f in scored if (fam[f] > 20) != (before[f] > 20))
    tail = " ".join(f"{f} {fam[f]:.1f}" for f in ("test", "cait", "fastvit", "hrnet", "volo", "regnetz") if f in fam)
    return (f"{dev[:12]:12s} tile {label:6s} {int((fam <= 20).sum())}/{len(fam)}, mean {fam.mean():.2f}, worst "
            f"{fam.idxmax()} {fam.max():.1f}, pooled {pooled:.2f} | {tail} | crosses: {cross or 'none'}")


def full(out: Path, conv_tile: int, columns: Path) -> None:
    """``scripts/bench/zoo.py``'s GPU part with the pad columns joined and ``conv_tile`` set, figures to ``out``."""
    import runpy

    import carb.data.importers.timm_zoo as tz

    pad, shipped = pad_columns(columns), tz.with_trace

    def joined(frame: pd.DataFrame, *args, **kw) -> pd.DataFrame:
        return with_pad(shipped(frame, *args, **kw), pad)

    tz.with_trace = joined
    conv_tile = int(conv_tile) if str(conv_tile).isdigit() else conv_tile
    sys.argv = ["zoo.py", "--part", "gpu", "--devices", "gpu", "--table", "--no-screen", "--out", str(out),
                "--zoo-latency", f"conv_tile={conv_tile}"]
    runpy.run_path(str(ROOT / "scripts" / "bench" / "zoo.py"), run_name="__main__")


def main() -> None:
    """``--diagnose`` or ``--noise``."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--diagnose", action="store_true")
    p.add_argument("--noise", action="store_true")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--tiles", action="store_true")
    p.add_argument("--full", type=Path, default=None, metavar="OUT")
    p.add_argument("--conv-tile", default="128", help="a tile of carb.model.zoo_latency.CONV_TILES")
    p.add_argument("--columns", type=Path, default=Path("/tmp/zg43c/pad.parquet"))
    p.add_argument("--bench", type=Path, default=ROOT / "scripts" / "data" / "zoo_bench.json")
    p.add_argument("--preds", type=Path, default=Path("/tmp/zg43c/preds.parquet"),
                   help="--noise: every family's LOFO predictions (written on the first run)")
    a = p.parse_args()
    if not (a.diagnose or a.noise or a.tiles or a.full):
        print("choose --diagnose, --noise, --tiles or --full OUT", file=sys.stderr)
        raise SystemExit(2)
    if a.diagnose:
        diagnose(a.out)
    if a.noise:
        noise(a.bench, a.preds)
    if a.tiles:
        tiles(a.columns)
    if a.full is not None:
        full(a.full, a.conv_tile, a.columns)


if __name__ == "__main__":
    main()
