"""Would the device probe help every prediction? The latency prior with one more column per precision,
the probe's summed convolution time of the row's network (:meth:`carb.model.layer_cost.LayerCostModel.network_ms`),
fitted on the lower range of each extrapolation split of the CPU reference and scored on the upper range
(prior only, no cascade). Two probes: all of the shipped probe (it timed layers of the whole reference
space), and only its layers that occur in the training range's networks (batch split: batches <= 4 too).

    python scripts/bench/probe_term.py

No timing is done (safe beside other work). Prints one line per split: R^2 and MAPE of the prior as
shipped, with the term and the whole probe, with the term and the training-range probe.
"""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
PRECISIONS = ("fp32", "bf16", "fp16")


def conv_ms(model, X) -> np.ndarray:
    """The probe model's convolution time of each row's network at its own precision (ms per batch)."""
    out = np.zeros(len(X))
    for p in PRECISIONS:
        m = (X["precision"] == p).to_numpy()
        if m.any():
            out[m] = model.network_ms(X[m], p)
    return out


def main() -> None:
    warnings.filterwarnings("ignore")
    from sklearn.metrics import r2_score

    from carb.data.io import reference_dataset
    from carb.data.probes import load_probe
    from carb.data.schema import ok_rows
    from carb.design.shapes import space_layers
    from carb.model.layer_cost import LayerCostModel
    from carb.model.nnls import nnls_relative
    from carb.model.physics import make_prior, native_dispatch

    df = ok_rows(reference_dataset()).reset_index(drop=True)
    probe = load_probe(str(df["device_id"].iloc[0]))
    nat = native_dispatch(df)
    fit = lambda table: LayerCostModel(threads=nat["threads"], onednn=tuple(nat["onednn"])).fit(table)  # noqa: E731
    whole = fit(probe)
    splits = {"batch": df["batch_size"] <= 4, "depth": df["depth"] <= 26, "width": df["width_mult"] <= 0.5,
              "input": df["input_size"] <= 64}

    def score(y, f) -> str:
        return f"R2 {r2_score(y, f):.3f} MAPE {100 * np.mean(np.abs(f / y - 1)):.1f} %"

    for name, lo in splits.items():
        tr, te = df[lo], df[~lo]
        layers = {tuple(r) for r in space_layers(tr)}
        keep = np.array([tuple(r) in layers for r in probe[["cin", "cout", "kernel", "stride", "H_in"]].to_numpy()])
        if name == "batch":
            keep &= probe["batch_size"].to_numpy() <= 4
        prior = make_prior("latency_ms", channel_block=16, cpu_dispatch=True).fit(tr, tr["latency_ms"])
        y = te["latency_ms"].to_numpy()
        cells = [f"prior {score(y, prior.predict(te))}"]
        for label, model in (("whole probe", whole), (f"training-range probe ({int(keep.sum())} rows)", fit(probe[keep]))):
            def design(X):
                c = conv_ms(model, X)
                return np.column_stack([prior.design(X)] + [np.where(X["precision"] == p, c, 0.0) for p in PRECISIONS])
            coef = nnls_relative(design(tr), tr["latency_ms"].to_numpy())
            cells.append(f"+ term, {label}: {score(y, design(te) @ coef)}")
        print(f"{name:>6}: " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
