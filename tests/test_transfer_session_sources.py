"""scripts/bench/transfer_pairs.py ``--extra-session`` / ``--pool-sessions`` (issue 44, k44d): a further measuring
session of a benchmark CPU (its rows and the probe of the same session) as a source of the other CPU targets only,
or moved by its own probe to its device's shipped probe. On the shipped Xeon session of 2026-12-07 and its probe."""
import subprocess
import sys
import warnings

import numpy as np
import pytest

from scripts.bench import transfer_pairs as tp

SESSION = ("carb/data/cpu-intel-xeon-2026-12-07.parquet", "scripts/data/xeon-probe-2026-12-07.csv")


@pytest.fixture(scope="module")
def session():
    tp.EXTRA_SESSIONS[:] = [SESSION]
    try:
        (s,) = tp.load_sessions()
    finally:
        tp.EXTRA_SESSIONS[:] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s["model"] = tp.fit_cpu_source(s["rows"], ["latency_ms", "peak_memory_MB"])
    return s


def test_a_session_is_a_source_of_every_target_but_its_own_device(session):
    devices = tp.cpu_devices()
    zs = tp.session_zero_shots([session], devices)
    ids = {n: str(tp._identity(d)[1]) for n, d in devices.items()}
    assert session["device_id"] in ids.values()
    for name, transfers in zs.items():
        if ids[name] == session["device_id"]:
            assert transfers == []   # leave-one-device-out: no session of the target's CPU
        else:
            assert len(transfers) == 1 and str(transfers[0].device_id_) == ids[name]
            assert transfers[0].source_ is session["model"]


def test_rows_moved_by_the_probes_ratio(session):
    from carb.data.probes import load_probe

    rows = session["rows"]
    same = tp.session_rows_moved(session, session["model"], session["probe"])
    assert np.allclose(same["latency_ms"], rows["latency_ms"])   # its own probe: no move
    moved = tp.session_rows_moved(session, session["model"], load_probe(session["device_id"]))
    log = np.log(moved["latency_ms"].to_numpy(float) / rows["latency_ms"].to_numpy(float))
    for p in ("bf16", "fp16", "fp32"):   # the 12-05 probe is the faster session's: every precision moves down
        assert np.median(log[rows["precision"].astype(str).to_numpy() == p]) < -0.03
    assert (moved["peak_memory_MB"].to_numpy() == rows["peak_memory_MB"].to_numpy()).all()


def test_a_bad_extra_session_is_one_line_and_exit_2(tmp_path):
    r = subprocess.run([sys.executable, "-m", "scripts.bench.transfer_pairs", "--no-gpu", "--extra-session",
                        f"{SESSION[0]}:{SESSION[1]}"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [f"--extra-session: '{SESSION[0]}:{SESSION[1]}' must be DATASET=PROBE, "
                                             "two existing files"]
