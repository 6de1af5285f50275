"""A model logged quiet (carb-train, carb-calibrate: the other-CPU warning is said where the model is used) stays
quiet when MLflow loads it back in the logging process to check its input example; a copy loaded in another
process (``mlflow models serve``, a later command) warns as usual."""
from __future__ import annotations

import os
import pickle

from carb.analysis.predictor import ServedModel


def test_quiet_survives_a_reload_in_the_logging_process():
    copy = pickle.loads(pickle.dumps(ServedModel({"fitted": 1}, quiet=True)))
    assert copy.quiet is True and copy.cascade == {"fitted": 1}
    assert pickle.loads(pickle.dumps(ServedModel({"fitted": 1}))).quiet is False


def test_another_process_s_copy_warns():
    state = ServedModel({"fitted": 1}, quiet=True).__getstate__()
    other = ServedModel.__new__(ServedModel)
    other.__setstate__({**state, "quiet_pid": os.getpid() + 1})
    assert other.quiet is False
    old = ServedModel.__new__(ServedModel)
    old.__setstate__({"cascade": {"fitted": 1}})     # pickled by a release without the key
    assert old.quiet is False and old.cascade == {"fitted": 1}
