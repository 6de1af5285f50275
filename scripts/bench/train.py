"""Benchmark: fit time of the full `carb` preset on 13,000 rows with the real schema (synthetic rows
from tests/synthetic.py: timing only, never shown as measurements), split by stage, and of `carb_fast`
on the shipped CPU reference dataset (``--fast-only``: only the latter). Last line: ``fit_full_13k_s=<s> fit_fast_reference_s=<s>``.
"""
from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))


def fit(preset: str, df) -> tuple[float, dict]:
    from carb.commands.cli import compose, to_dict
    from carb.data.schema import TARGETS
    from carb.data.split import split_dataset
    from carb.model.presets import build_cascade

    cfg = compose("train", [f"model={preset}"])
    tr, va, _ = split_dataset(df, 0).frames(df)
    m = build_cascade(to_dict(cfg.model), to_dict(cfg.features))
    ts = [t for t in TARGETS if t in df and df[t].notna().any()]
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m.fit(tr, tr[ts], va, va[ts])
    return time.perf_counter() - t, dict(m.fit_seconds_)


def main() -> None:
    from synthetic import synthetic_dataset

    from carb.data.io import reference_dataset
    from carb.data.schema import ok_rows

    ref = ok_rows(reference_dataset())
    fast_s, fast_split = fit("carb_fast", ref)
    print(f"carb_fast on the reference dataset ({len(ref)} rows): {fast_s:.1f} s; per stage "
          + ", ".join(f"{k} {v:.1f} s" for k, v in fast_split.items() if k != "total"))
    full_s = float("nan")
    if "--fast-only" not in sys.argv[1:]:   # the paper-size fit takes ~5 min on 2 cores
        big = synthetic_dataset(13_000, seed=0)
        full_s, full_split = fit("carb", big)
        print(f"carb (paper sizes) on {len(big)} synthetic rows: {full_s:.1f} s; per stage (incl. out-of-fold "
              f"refits and correctors) " + ", ".join(f"{k} {v:.1f} s" for k, v in full_split.items() if k != "total"))
    print(f"fit_full_13k_s={full_s:.1f} fit_fast_reference_s={fast_s:.1f}")


if __name__ == "__main__":
    main()
