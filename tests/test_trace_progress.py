"""Progress of tracing many networks on a cold trace cache (:mod:`carb.design.trace_progress`): a count and
an ETA per uncached network while a command runs (:func:`carb.commands.progress.trace_progress`), nothing
when the cache is warm, when few networks are missing, or when no command set a reporter."""
from __future__ import annotations

import pandas as pd
import pytest

from carb.commands.progress import trace_progress
from carb.design import trace_progress as tp
from carb.design.trace import cache_path, model_key


class Recorder:
    """A reporter that records what :func:`carb.design.trace_progress.tracing` asks of it."""

    def __init__(self, total: int) -> None:
        self.total, self.labels, self.finished = total, [], None

    def begin(self, label: str, weight: float = 1.0) -> None:
        self.labels.append(label)

    def finish(self, label: str = "done") -> None:
        self.finished = label


@pytest.fixture
def cold(tmp_path, monkeypatch):
    """An empty trace cache of this test's own."""
    monkeypatch.setenv("CARB_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _run(pairs, steps):
    """The reporters :func:`tracing` started for ``pairs``, stepping through ``steps``."""
    started: list[Recorder] = []

    def start(total: int) -> Recorder:
        started.append(Recorder(total))
        return started[-1]

    with tp.reporting(start), tp.tracing(pairs) as step:
        for name, size in steps:
            step(name, size)
    return started


def test_uncached_networks_counted_and_reported_once_each(cold):
    """Each uncached (name, size) begins one unit ``(i/n)``, a repeat does not; the end finishes it."""
    pairs = [(f"timm:net{i}", 224) for i in range(tp.MIN_COLD + 2)]
    started = _run(pairs + pairs[:3], pairs + pairs[:3])
    assert len(started) == 1 and started[0].total == len(pairs)
    rec = started[0]
    assert len(rec.labels) == len(pairs)
    assert rec.labels[0] == f"tracing timm:net0 at 224 px (1/{len(pairs)}, not in the trace cache)"
    assert rec.labels[-1].startswith(f"tracing timm:net{len(pairs) - 1} at 224 px ({len(pairs)}/{len(pairs)}")
    assert rec.finished == f"traced {len(pairs)} networks into the trace cache"


def test_quiet_when_cached_few_missing_or_no_reporter(cold, monkeypatch):
    """A warm cache (every entry on disk), fewer than MIN_COLD missing, or no reporter: nothing starts."""
    pairs = [(f"timm:net{i}", 160) for i in range(tp.MIN_COLD + 1)]
    for name, size in pairs[1:]:
        path = cache_path(model_key(name), (3, size, size))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
    assert tp.uncached(pairs) == [pairs[0]]
    assert _run(pairs, pairs) == []
    assert _run(pairs[:tp.MIN_COLD - 1] + [("timm:other", 160)], []) == []
    with tp.tracing([(f"timm:x{i}", 96) for i in range(20)]) as step:   # no command: a no-op
        step("timm:x0", 96)


def test_a_warm_cache_of_many_networks_shows_a_count(cold, monkeypatch):
    """carb-train data=timm_zoo: 1,627 cached networks read in minutes after 'tracking store' with no line;
    at least MIN_WARM distinct cached networks now begin a unit every 1/WARM_LINES of them, then a done line."""
    monkeypatch.setattr(tp, "MIN_WARM", 10)
    monkeypatch.setattr(tp, "WARM_LINES", 5)
    pairs = [(f"timm:w{i}", 224) for i in range(12)]
    for name, size in pairs:
        path = cache_path(model_key(name), (3, size, size))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
    started = _run(pairs + pairs[:4], pairs + pairs[:4])
    assert len(started) == 1 and started[0].total == 4        # 12 networks, chunks of 3
    assert started[0].labels[0] == "reading layer tables: timm:w0 at 224 px (1/12, cached)"
    assert [lb.split("(")[1].split(",")[0] for lb in started[0].labels] == ["1/12", "4/12", "7/12", "10/12"]
    assert started[0].finished == "read the layer tables of 12 networks"
    assert _run(pairs[:9], pairs[:9]) == []                   # fewer than MIN_WARM: quiet as before


def test_error_closes_without_a_done_line(cold):
    """An error inside the block: the reporter is closed (no "traced ... in" line) and the error goes on."""
    closed = []
    rec = Recorder(0)
    rec.close = lambda: closed.append(True)
    with pytest.raises(RuntimeError), tp.reporting(lambda total: rec), \
            tp.tracing([(f"timm:e{i}", 224) for i in range(tp.MIN_COLD)]) as step:
        step("timm:e0", 224)
        raise RuntimeError("boom")
    assert closed == [True] and rec.finished is None


def test_command_prints_count_and_eta_on_a_cold_cache_only(cold, monkeypatch, capsys):
    """Featurizing real networks under a command's reporter (the ``carb-screen`` path,
    :func:`carb.design.zoo_inputs.zoo_features_frame`): a cold cache prints a line per network with its
    count, the second one with an ETA, and a done line; the same networks again (cache warm) print nothing."""
    from carb.design.zoo_features import layer_columns
    from carb.design.zoo_inputs import zoo_features_frame

    monkeypatch.setattr(tp, "MIN_COLD", 2)
    knobs = pd.DataFrame({"model_name": ["tv:squeezenet1_0", "tv:squeezenet1_1", "tv:squeezenet1_0"],
                          "input_size": [72, 72, 72], "batch_size": [1, 2, 4]})
    with trace_progress("screen"):
        F = zoo_features_frame(knobs)
    assert (F["refused"] == "").all()
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("carb-screen:")]
    assert lines[0].startswith("carb-screen: [  0%] tracing tv:squeezenet1_0 at 72 px (1/2, not in the trace cache)")
    assert "tracing tv:squeezenet1_1 at 72 px (2/2" in lines[1] and "ETA" in lines[1]
    assert lines[-1].startswith("carb-screen: traced 2 networks into the trace cache in") and len(lines) == 3
    with trace_progress("train"):   # warm now: the training path (layer_columns) is quiet
        layer_columns(knobs)
        zoo_features_frame(knobs)
    assert "carb-train" not in capsys.readouterr().err


def test_progress_config_switch_applies_to_tracing_lines(cold, monkeypatch, capsys):
    """The command's ``progress.enabled`` (its config) switches the tracing lines too."""
    monkeypatch.setattr(tp, "MIN_COLD", 1)
    for enabled in (False, True):
        with trace_progress("train", {"progress": {"enabled": enabled, "min_interval_s": 0.0}}), \
                tp.tracing([("timm:q", 64)]) as step:
            step("timm:q", 64)
        err = capsys.readouterr().err
        assert ("carb-train: [  0%] tracing timm:q at 64 px (1/1" in err) is enabled


def test_networks_the_tracer_refused_are_not_missing_on_the_next_run(cold):
    """A refused network is never cached: its refusal is recorded in the trace cache, so a warm run (every
    other network cached, the rest refused before) starts no progress line; a network that traces later
    loses its record."""
    from carb.design import trace as tracer
    from carb.errors import ZooError

    refused = [(f"no_such_net_{i}", 96) for i in range(tp.MIN_COLD + 1)]
    assert tp.uncached(refused) == refused
    for name, size in refused:
        with pytest.raises(ZooError):
            tracer.trace(name, (1, 3, size, size))
    assert tp.uncached(refused) == []
    assert _run(refused, refused) == []
    path = cache_path(model_key(refused[0][0]), (3, 96, 96))
    assert "unknown model" in tracer.refusal_path(path).read_text()
    import torch.nn as nn

    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU())
    path = cache_path(model_key(net), (3, 32, 32))
    tracer.refusal_path(path).write_text("refused once")
    tracer.trace(net, (1, 3, 32, 32))
    assert path.exists() and not tracer.refusal_path(path).exists()
