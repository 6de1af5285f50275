"""scripts/studies/transfer_sessions.py: the session split, the scenarios' rows, the summary and the machine-readable
line (small frames; no model fitted). The cross-session held-out rows are score_pair's ``held_out``
(tests/test_transfer_pairs_held_out.py)."""
import numpy as np
import pandas as pd

from scripts.studies import transfer_sessions as ts


def _rows(n1: int = 6, n2: int = 4) -> pd.DataFrame:
    """``n1`` rows of session fc-v1272 then ``n2`` of fc-v1300, two precisions."""
    drv = ["linux-6.18.44-fc-v1272"] * n1 + ["linux-6.18.44-fc-v1300"] * n2
    return pd.DataFrame({"driver": drv, "precision": ["fp32", "bf16"] * ((n1 + n2) // 2),
                         "latency_ms": np.arange(1, n1 + n2 + 1, dtype=float), "x": np.arange(n1 + n2, dtype=float)})


def test_sessions_split_in_order_with_fresh_index():
    parts = ts.sessions(_rows())
    assert [len(p) for p in parts] == [6, 4]
    assert set(parts[1]["driver"]) == {"linux-6.18.44-fc-v1300"}
    assert list(parts[1].index) == [0, 1, 2, 3]
    assert ts.short_session(parts[1]["driver"].iloc[0]) == "fc-v1300"


def test_scenarios_pick_and_hold_out_the_right_sessions():
    rows = _rows()
    parts = ts.sessions(rows)
    sc = ts.scenario_rows(parts, rows)
    assert list(sc) == list(ts.SCENARIOS)
    assert sc["mixed"][0] is rows and sc["mixed"][1] is None
    assert sc["s1->s2"][0] is parts[0] and sc["s1->s2"][1] is parts[1]
    assert sc["s2->s1"][0] is parts[1] and sc["s2->s1"][1] is parts[0]


def _records() -> pd.DataFrame:
    rec = []
    for sc, base in (("mixed", 14.0), ("s1", 9.0), ("s2", 7.0)):
        for pick, d in enumerate((-1.0, 1.0)):
            rec += [{"scenario": sc, "model": "calibrated", "target": "latency_ms", "k": 10, "precision": "bf16",
                     "n": 50, "pick": pick, "mape_pct": base + d, "coverage": 0.8},
                    {"scenario": sc, "model": "calibrated", "target": "latency_ms", "k": 10, "precision": "fp32",
                     "n": 50, "pick": pick, "mape_pct": 5.0, "coverage": 1.0},
                    {"scenario": sc, "model": "source", "target": "latency_ms", "k": 10, "precision": "bf16",
                     "n": 50, "pick": pick, "mape_pct": 99.0, "coverage": np.nan}]
    return pd.DataFrame(rec)


def test_summary_and_worst_cell_and_line():
    s = ts.summarize(_records())
    m = s[(s.scenario == "mixed") & (s.precision == "bf16")].iloc[0]
    assert (m.mape_pct, m.mape_min, m.mape_max, m.coverage) == (14.0, 13.0, 15.0, 0.8)
    assert ts.worst(s, 10) == {"mixed": (14.0, "bf16"), "s1": (9.0, "bf16"), "s2": (7.0, "bf16")}
    parts = ts.sessions(_rows())
    line = ts.last_line(s, "dev", parts, 10)
    assert line.startswith("sessions: target=dev sessions=fc-v1272:6,fc-v1300:4 ")
    assert "k10_worst=mixed:14.0(bf16),s1:9.0(bf16),s2:7.0(bf16)" in line
    assert line.endswith("k10_session_share=0.43")   # 1 - 8 / 14
