"""carb-train's speed work (issue 32 item 1, helper trainspeed): the refit pool hands the workers the waiting task
of lowest priority, even one submitted after others were waiting; closing it with tasks still waiting neither
runs nor hangs on them; the main fit's metrics computed ahead give evaluate_cascade's result, in its order."""
from __future__ import annotations

import time

import pytest

from carb.analysis import refits as R


def stamp(seconds: float, note=None) -> float:
    """A task: sleep ``seconds``, return when it started (seconds since the epoch)."""
    start = time.time()
    time.sleep(seconds)
    return start


def test_a_later_task_of_lower_priority_runs_before_waiting_ones():
    blockers = [R.Task("block", i, None, stamp, (0.6,), priority=0.0) for i in range(2)]
    waiting = [R.Task("late", i, None, stamp, (0.05,), priority=5.0) for i in range(3)]
    with R.RefitRunner(2).start(blockers + waiting) as runner:
        assert runner.parallel
        urgent = runner.submit(R.Task("urgent", 0, None, stamp, (0.05,), priority=-1.0))
        done = runner.collect()
        first = urgent.result().result
    assert set(done) == {("block", 0), ("block", 1), ("late", 0), ("late", 1), ("late", 2)}
    lates = [done[("late", i)].result for i in range(3)]
    assert first < min(lates)                                    # submitted last, ran before the waiting ones
    assert min(lates) >= max(done[("block", i)].result for i in range(2))   # the blockers went first


def test_plan_orders_the_precision_split_first_and_folds_last():
    from tests.test_evalspeed_refits import EV
    from tests.test_physics import FAST, KNOB_FEATURES, physics_rows

    from carb.model.cascade import CarbCascade

    rows = physics_rows(150, seed=4)
    tasks, _ = R.plan_refits(CarbCascade(features=KNOB_FEATURES, **FAST), rows, rows, EV,
                             ["peak_memory_MB", "latency_ms"], calibrated=True)
    prio = {(t.kind, t.index): t.priority for t in tasks}
    splits = [t for t in tasks if t.kind == "split"]
    assert splits and all(t.priority == R.PRIORITY["split"] for t in splits if "precision" not in (t.label or ""))
    assert max(prio[k] for k in prio if k[0] == "split") < prio[("lobo", 0)] < min(p for k, p in prio.items()
                                                                                 if k[0] == "arch")
    assert R.PRIORITY["extrapolation figure"] < R.PRIORITY["precision split"] < R.PRIORITY["split"]
    assert R.PRIORITY["sanity"] < R.PRIORITY["arch"] < R.PRIORITY["figures"]


def test_closing_with_tasks_waiting_cancels_them():
    tasks = [R.Task("t", i, None, stamp, (0.3,)) for i in range(6)]
    runner = R.RefitRunner(2).start(tasks)
    time.sleep(0.1)
    t0 = time.perf_counter()
    runner.close()
    assert time.perf_counter() - t0 < 30
    jobs = [job for _, job in runner._jobs]
    assert any(job.cancelled() for job in jobs)                # the waiting ones never ran
    assert not runner.parallel


@pytest.mark.parametrize("with_intervals", [False, True])
def test_main_fit_metrics_ahead_give_the_same_evaluation(with_intervals):
    from tests.test_physics import FAST, KNOB_FEATURES, physics_rows

    from carb.analysis.assess import evaluate_cascade, main_fit_metrics
    from carb.model.cascade import CarbCascade

    rows = physics_rows(160, seed=5)
    train, val, test = rows.iloc[:100], rows.iloc[100:130], rows.iloc[130:]
    targets = ["peak_memory_MB", "latency_ms"]
    model = CarbCascade(features=KNOB_FEATURES, **FAST).fit(train, train[targets], val, val[targets])
    if with_intervals:
        from carb.model.intervals import calibrate

        model.intervals_ = calibrate(model, val, val[targets], coverage=0.9)
    ev = {"lobo": {"enabled": False}, "extrapolation": {"enabled": False},
          "architecture_intervals": {"enabled": False}, "sanity": {"enabled": False}}
    plain, extras = evaluate_cascade(model, train, val, test, rows, ev)
    ahead = main_fit_metrics(model, train, test, ev)
    split, extras2 = evaluate_cascade(model, train, val, test, rows, ev, first=ahead)
    assert list(plain) == list(split)                         # same metrics in the same order (metrics.json)
    assert plain == pytest.approx(split, nan_ok=True)
    assert any(k.startswith("interval_test_") for k in plain) == with_intervals
    assert extras["importances"] == extras2["importances"] and extras["pred"].equals(extras2["pred"])
