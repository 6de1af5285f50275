"""A large run input's schema is inferred from each column's distinct values (carb.tracking.log.column_schema):
the same MLflow schema as inferring over every row, types and required flags alike."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from mlflow.types.utils import _infer_schema

from carb.tracking import log

# MLflow's hint about integer columns, once per inferred column here: not what these tests check
pytestmark = pytest.mark.filterwarnings("ignore:Hint. Inferred schema contains integer")


def _frame(n: int = 3000) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    energy = rng.random(n)
    energy[::7] = np.nan                                   # a target with missing values: not required
    return pd.DataFrame({"block": rng.choice(["basic", "bottleneck"], n), "depth": rng.choice([14, 50], n),
                         "width_mult": rng.choice([0.5, 1.0], n), "early_downsample": rng.random(n) > 0.5,
                         "precision": pd.Series(rng.choice(["fp32", "bf16"], n), dtype="str"),
                         "stages": pd.Series(rng.choice(["2-2-2-2", None], n), dtype=object),
                         "energy_J": energy, "batch_size": rng.choice([1, 8, 64], n).astype("int64")})


def test_column_schema_is_the_row_by_row_schema():
    df = _frame()
    assert log.column_schema(df) == _infer_schema(df)
    assert log.column_schema(df.dropna()) == _infer_schema(df.dropna())     # required flags follow the rows
    assert log.column_schema(df) != log.column_schema(df.dropna())


def test_log_dataset_records_the_same_schema_for_a_large_frame(tmp_path, monkeypatch):
    import mlflow

    from carb import tracking

    monkeypatch.setattr(log, "SCHEMA_ROWS", 100)            # this frame counts as large
    df = _frame()
    tracking.configure(f"sqlite:///{tmp_path}/m.db")
    with tracking.start_run("screen", "schema", f"sqlite:///{tmp_path}/m.db") as run_id:
        log.log_dataset(df, name="grid", source="test", context="candidates")
    inputs = mlflow.get_run(run_id).inputs.dataset_inputs
    assert len(inputs) == 1
    assert json.loads(inputs[0].dataset.schema) == {"mlflow_colspec": _infer_schema(df).to_dict()}
