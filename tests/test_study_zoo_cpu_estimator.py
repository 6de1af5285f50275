"""The CPU-zoo estimator study (zc43): the rows it scores carry the layer table's features, consistent with the
collector's stored counts, and the cascade's figures it compares against are read for the right device."""
from pathlib import Path

import numpy as np
import pandas as pd

from scripts.bench.zoo import cpu_part_settings
from scripts.studies.zoo_cpu_estimator import bench_table, zoo_rows

ZEN4 = Path(__file__).resolve().parents[1] / "carb" / "data" / "zoo-cpu.parquet"


def test_zoo_rows_traced_features_match_the_collector(tmp_path):
    """Two networks of the Zen 4 zoo: every row kept, in order, with ``tr_*`` columns and the traced MACs per batch
    equal to the collector's stored ``flops`` (both fvcore counts, one multiply-add = one FLOP)."""
    zoo = pd.read_parquet(ZEN4)
    sub = zoo[zoo["model_name"].isin(["tv:mnasnet1_0", "tv:resnet18"])].reset_index(drop=True)
    sub.to_parquet(tmp_path / "z.parquet")
    rows = zoo_rows(tmp_path / "z.parquet", cpu_part_settings([]))
    assert len(rows) == len(sub)
    assert rows["config_id"].tolist() == sub["config_id"].tolist()
    assert any(c.startswith("tr_") for c in rows.columns)
    macs = rows["gmacs_per_image"].to_numpy(float) * 1e9 * rows["batch_size"].to_numpy(float)
    np.testing.assert_allclose(macs, rows["flops"].to_numpy(float), rtol=1e-6)
    assert (rows["device_kind"] == "cpu").all() and (rows["timm_precision"] == rows["precision"]).all()


def test_bench_table_is_the_devices_own():
    """The Zen 4's cascade table from zoo_bench.json: one row per family of the zoo, pooled MAPE a percentage."""
    zoo = pd.read_parquet(ZEN4)
    table, pooled = bench_table(str(zoo["device_id"].iloc[0]))
    assert set(table.index) == set(zoo["family"].astype(str))
    assert 0 < pooled < 100
