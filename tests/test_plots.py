"""Every figure function in carb/plots/* on tiny synthetic data: it renders, every axes that shows data
has non-empty x and y labels, the title/legend the function sets is there, the figure reflects the data
it was given, and it saves as a PNG. Importing carb.plots.* neither calls ``matplotlib.use`` nor
imports pyplot (checked in a fresh interpreter)."""
from __future__ import annotations

import ast
import importlib
import inspect
import io
import json
import pkgutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

import carb.plots
from carb.analysis import screening
from carb.analysis.characterize import characterize_tables
from carb.data.schema import TARGETS
from carb.data.tiers import batch_tier
from carb.model.baselines import FlopsLinear
from carb.plots import characterize as pc
from carb.plots import probe as pp
from carb.plots import screen as ps
from carb.plots import train as pt
from carb.plots import tune as ptu

sys.path.insert(0, str(Path(__file__).parent))
from synthetic import synthetic_dataset

SCALE_B = 1.5          # device B measures every target 1.5x device A on the same configurations


# --------------------------------------------------------------------------- data

@pytest.fixture(scope="module")
def data():
    a = synthetic_dataset(80, seed=3, device_name="Dev A")
    b = synthetic_dataset(80, seed=3, device_name="Dev B")
    for t in TARGETS:
        b[t] = b[t] * SCALE_B
    tables = characterize_tables(a, b)
    rng = np.random.default_rng(0)
    pred = pd.DataFrame({f"pred_{t}": a[t].to_numpy(float) * rng.uniform(0.9, 1.1, len(a)) for t in TARGETS},
                        index=a.index)
    b1 = FlopsLinear().fit(a, a[list(TARGETS)])
    budget = {"energy_J": float(b1.predict(a)["pred_energy_J"].median())}   # about half are feasible
    result = screening.screen(a, b1, budget=budget, objective="energy_J")
    importances = {t: [(f"feat_{t}_{i}", float(10 - i)) for i in range(4)] + [(f"pred_{t}_up", 1.0)]
                   for t in ("peak_memory_MB", "latency_ms")}
    # two extrapolation splits of a's rows (made here): CARB within 10 %, B1 a FLOPs line
    b1p = b1.predict(a)
    rows = a.assign(**{c: pred[c].to_numpy() for c in pred.columns}, **{f"b1_{c}": b1p[c].to_numpy() for c in b1p.columns})
    xval = {"batch": rows[rows["batch_size"] > rows["batch_size"].median()].reset_index(drop=True),
            "depth": rows[rows["depth"] > rows["depth"].median()].reset_index(drop=True)}
    xval_table = pd.DataFrame([{"split": s, "target": t, "description": f"train lower {s}, test upper",
                                "interval_coverage": 0.85} for s in xval for t in TARGETS])
    return {"a": a, "b": b, "tables": tables, "pred": pred, "screen": result, "importances": importances,
            "xval": xval, "xval_table": xval_table}


def _probe_table() -> pd.DataFrame:
    """A small probe table (made here): 3x3 and 1x1 convolutions, fp32 on oneDNN, fp16 native, ~2 and ~50 GMAC/s."""
    rows = []
    for p, backend, gmac_s in (("fp32", "Mkldnn", 50.0), ("fp16", "Slow2d", 2.0)):
        for cin, k, h, b in ((16, 3, 32, 1), (64, 1, 16, 8), (32, 3, 8, 4)):
            macs = (h * h) * cin * cin * k * k * b
            rows.append({"device_id": "dev", "threads": 1, "precision": p, "cin": cin, "cout": cin, "kernel": k,
                         "stride": 1, "H_in": h, "batch_size": b, "time_ms": macs / gmac_s / 1e6, "backend": backend})
    return pd.DataFrame(rows)


#: Every public figure function, what draws it from the fixture's data, and what the function sets
#: besides axis labels: a title on each data axes, a legend on some axes, a figure suptitle.
CASES: dict[str, tuple[Callable[[dict], Figure], dict[str, bool]]] = {
    "carb.plots.characterize.knob_figure": (
        lambda d: pc.knob_figure(d["tables"]["knob_medians"], "energy_J", "Dev A"),
        {"axes_title": False, "legend": True, "suptitle": True}),
    "carb.plots.characterize.divergence_figure": (
        lambda d: pc.divergence_figure(d["tables"]["divergence"], d["tables"]["divergence_ratios"], "Dev A"),
        {"axes_title": False, "legend": True, "suptitle": True}),
    "carb.plots.characterize.efficiency_figure": (
        lambda d: pc.efficiency_figure(d["tables"]["efficiency"], "Dev A"),
        {"axes_title": False, "legend": True, "suptitle": True}),
    "carb.plots.characterize.cross_device_figure": (
        lambda d: pc.cross_device_figure(d["tables"]["cross_device_pairs"], d["tables"]["cross_device"],
                                         "Dev A", "Dev B"),
        {"axes_title": True, "legend": True, "suptitle": True}),
    "carb.plots.train.pred_vs_measured": (
        lambda d: pt.pred_vs_measured(d["a"], d["pred"], title="tiny"),
        {"axes_title": True, "legend": True, "suptitle": True}),
    "carb.plots.train.importances_figure": (
        lambda d: pt.importances_figure(d["importances"]),
        {"axes_title": True, "legend": False, "suptitle": True}),
    "carb.plots.train.extrapolation_figure": (
        lambda d: pt.extrapolation_figure(d["xval"], d["xval_table"]),
        {"axes_title": True, "legend": True, "suptitle": True}),
    "carb.plots.train.residuals_by_tier": (
        lambda d: pt.residuals_by_tier(d["a"], d["pred"]),
        {"axes_title": True, "legend": False, "suptitle": False}),
    "carb.plots.screen.pareto_figure": (
        lambda d: ps.pareto_figure(d["screen"]),
        {"axes_title": True, "legend": True, "suptitle": False}),
    "carb.plots.tune.history_figure": (
        lambda d: ptu.history_figure([0, 1, 2, 3, 4], [5.0, 6.0, 3.0, 4.0, 2.5], "mae", "energy_J / lgbm"),
        {"axes_title": True, "legend": True, "suptitle": False}),
    "carb.plots.tune.importance_figure": (
        lambda d: ptu.importance_figure({"learning_rate": 0.6, "num_leaves": 0.3, "min_child": 0.1},
                                        "energy_J / lgbm"),
        {"axes_title": True, "legend": False, "suptitle": False}),
    "carb.plots.probe.probe_figure": (
        lambda d: pp.probe_figure(_probe_table(), "tiny probe"),
        {"axes_title": True, "legend": True, "suptitle": False}),
}
#: Public functions that return several figures (tested on their own below).
AGGREGATES = {"carb.plots.characterize.characterize_figures", "carb.plots.train.train_figures"}


#: Modules of carb/plots that draw nothing themselves: ``tasks`` runs the figure functions as worker tasks.
NOT_FIGURES = {"carb.plots.tasks"}


def _plot_modules() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(carb.plots.__path__, "carb.plots.")
                  if m.name not in NOT_FIGURES)


def _figure_functions() -> set[str]:
    out = set()
    for name in _plot_modules():
        mod = importlib.import_module(name)
        for attr, obj in vars(mod).items():
            if inspect.isfunction(obj) and obj.__module__ == name and not attr.startswith("_"):
                out.add(f"{name}.{attr}")
    return out


def _data_axes(fig: Figure) -> list:
    """Visible axes that draw data (lines, scatters/fills, bars); note-only panels are left out."""
    return [ax for ax in fig.axes if ax.get_visible() and (ax.lines or ax.collections or ax.patches)]


def _check_labels(fig: Figure, expect: dict[str, bool], name: str) -> None:
    axes = _data_axes(fig)
    assert axes, f"{name}: no axes with data"
    for i, ax in enumerate(axes):
        assert ax.get_xlabel().strip(), f"{name}: axes {i} has no x label"
        assert ax.get_ylabel().strip(), f"{name}: axes {i} has no y label"
        if expect["axes_title"]:
            assert ax.get_title().strip(), f"{name}: axes {i} has no title"
    if expect["legend"]:
        legends = [ax.get_legend() for ax in axes if ax.get_legend() is not None]
        assert legends and all(lg.get_texts() for lg in legends), f"{name}: no legend"
    if expect["suptitle"]:
        assert fig.get_suptitle().strip(), f"{name}: no figure title"


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=40)
    return buf.getvalue()


def _legend_texts(fig: Figure) -> list[str]:
    return [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]


# --------------------------------------------------------------------------- every figure

def test_every_figure_function_has_a_case():
    """A new figure function in carb/plots/ must be added to CASES (rendered and label-checked here)."""
    found = _figure_functions()
    assert found - set(CASES) - AGGREGATES == set()
    assert set(CASES) | AGGREGATES <= found, "CASES names a function that no longer exists"


@pytest.mark.parametrize("name", sorted(CASES))
def test_figure_renders_with_labelled_axes_and_saves_as_png(name, data):
    build, expect = CASES[name]
    fig = build(data)
    assert isinstance(fig, Figure), f"{name} returned {type(fig).__name__}"
    _check_labels(fig, expect, name)
    png = _png(fig)
    assert len(png) > 1000 and png.startswith(b"\x89PNG\r\n\x1a\n")


# --------------------------------------------------------------------------- characterize

def test_characterize_figures_draws_every_supported_figure(data, tmp_path):
    figs, skipped = pc.characterize_figures(data["tables"], dev_a="Dev A", dev_b="Dev B")
    assert skipped == {}
    assert set(figs) == {*(f"knobs_{t}" for t in TARGETS), "divergence", "efficiency", "cross_device"}
    for name, fig in figs.items():
        _check_labels(fig, {"axes_title": False, "legend": True, "suptitle": True}, name)
        assert "Dev A" in fig.get_suptitle()
    # one knob panel per knob that varies in the data, each with its knob on the x axis
    knobs = data["tables"]["knob_medians"]
    varying = {k for k in knobs["knob"].unique() if knobs.loc[knobs["knob"] == k, "value"].nunique() > 1}
    assert len(_data_axes(figs["knobs_energy_J"])) == len(varying)
    # cross-device panels: one per target, the fitted line is B = 1.5 A
    xd = figs["cross_device"]
    assert len(_data_axes(xd)) == len(TARGETS)
    assert any(t.startswith(f"fit: y = {SCALE_B:g}x") for t in _legend_texts(xd)), _legend_texts(xd)
    assert all("n = 80" in ax.get_title() for ax in _data_axes(xd))
    fig = figs["efficiency"]
    fig.savefig(tmp_path / "efficiency.png", dpi=40)
    assert (tmp_path / "efficiency.png").stat().st_size > 0


def test_characterize_figures_without_energy_or_telemetry(data):
    """A device without an energy counter or telemetry: the energy figures are skipped with a reason,
    the divergence figure says 'not measured' in the empty panels and still labels the others."""
    a = synthetic_dataset(80, seed=3, device_name="Dev A", energy=False, telemetry=False)
    figs, skipped = pc.characterize_figures(characterize_tables(a), dev_a="Dev A")
    assert "knobs_energy_J" not in figs and "not measured" in skipped["knobs_energy_J"]
    assert "efficiency" not in figs and "energy_J" in skipped["efficiency"]
    assert "cross_device" not in figs and "cross_device" not in skipped   # one device: not attempted
    assert {"knobs_latency_ms", "knobs_peak_memory_MB", "divergence"} <= set(figs)
    div = figs["divergence"]
    caption = div.get_supxlabel()
    assert "energy_J" in caption and "not measured" in caption.lower(), caption
    visible = [ax for ax in div.axes if ax.get_visible()]
    assert len(visible) == len(_data_axes(div)) == 1     # only the latency panel: no empty panel drawn
    assert all(ax.patches or ax.lines or ax.collections for ax in visible)
    for fig in figs.values():                            # units: MB (2**20 bytes), never MiB
        labels = [ax.get_ylabel() + ax.get_xlabel() + ax.get_title() for ax in fig.axes] + [fig.get_suptitle()]
        assert not any("MiB" in t for t in labels)
    for name, fig in figs.items():
        _check_labels(fig, {"axes_title": False, "legend": False, "suptitle": True}, name)
        assert len(_png(fig)) > 0


def test_characterize_figure_functions_return_none_without_data(data):
    t = data["tables"]
    assert pc.knob_figure(t["knob_medians"], "no_such_target") is None
    assert pc.divergence_figure(t["divergence"].iloc[0:0], t["divergence_ratios"]) is None
    assert pc.efficiency_figure(t["efficiency"].iloc[0:0]) is None
    assert pc.cross_device_figure(t["cross_device_pairs"], t["cross_device"].iloc[0:0], "A", "B") is None


# --------------------------------------------------------------------------- train

def test_pred_vs_measured_has_one_panel_per_measured_target(data):
    fig = pt.pred_vs_measured(data["a"], data["pred"])
    axes = _data_axes(fig)
    assert [ax.get_title().splitlines()[0] for ax in axes] == list(TARGETS)
    a = data["a"].copy()
    a["energy_J"] = np.nan                                # not measured: no panel
    fig = pt.pred_vs_measured(a, data["pred"])
    assert [ax.get_title().splitlines()[0] for ax in _data_axes(fig)] == ["peak_memory_MB", "latency_ms"]
    # every point is drawn: scatter sizes add up to the rows of the panel's target
    n = sum(len(c.get_offsets()) for c in _data_axes(fig)[0].collections)
    assert n == len(a)


def test_train_figures_are_print_width_with_tier_ranges_in_the_legend(data):
    figs = pt.train_figures(data["a"], data["pred"], data["importances"], list(TARGETS))
    for name, fig in figs.items():
        assert fig.get_size_inches()[0] * fig.dpi >= pt.MIN_WIDTH_PX, name
    fig = figs["figures/pred_vs_measured.png"]
    legend = _legend_texts(fig)
    assert any("small (bs 1-4)" in t for t in legend) and "y = x" in legend, legend
    assert all(ax.get_legend().get_title().get_text() == "batch tier" for ax in _data_axes(fig))
    colours = {tuple(np.round(c.get_facecolor()[0][:3], 3)) for ax in _data_axes(fig) for c in ax.collections}
    from matplotlib.colors import to_rgb

    okabe_ito = {tuple(np.round(to_rgb(c), 3)) for c in ("#E69F00", "#56B4E9", "#009E73", "#0072B2")}
    assert colours and colours <= okabe_ito
    ticks = [t.get_text() for ax in _data_axes(figs["figures/residuals_by_batch_tier.png"]) for t in ax.get_xticklabels()]
    assert any("(bs 1-4)" in t for t in ticks), ticks
    imp = figs["figures/importances.png"]
    assert {"input feature", "upstream cascade prediction (pred_*)"} <= {t.get_text() for lg in imp.legends for t in lg.get_texts()}


def _png_width(fig: Figure) -> int:
    """Pixel width of the PNG ``fig`` saves as with no ``dpi`` given (what ``mlflow.log_figure`` does)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return int.from_bytes(buf.getvalue()[16:20], "big")     # IHDR width


def test_train_figures_are_1200_px_wide_as_logged_even_with_one_panel(data):
    one = {"pred_vs_measured": pt.pred_vs_measured(data["a"], data["pred"], ["latency_ms"]),
           "importances": pt.importances_figure({"latency_ms": data["importances"]["latency_ms"]}),
           "residuals": pt.residuals_by_tier(data["a"], data["pred"], ["latency_ms"])}
    for name, fig in one.items():
        assert len(fig.axes) == 1, name
        assert fig.get_size_inches()[0] * fig.dpi >= 1200, name
        assert _png_width(fig) >= 1200, name
        ax = fig.axes[0]
        assert min(t.get_fontsize() for t in ax.get_xticklabels() + ax.get_yticklabels()) >= 9, name
        assert 10 <= ax.title.get_fontsize() <= 11, name
    ticks = [t.get_text() for t in one["residuals"].axes[0].get_xticklabels()]
    assert any("(bs 1-4)" in t for t in ticks) and any("(bs 17-128)" in t for t in ticks), ticks
    for fig in pt.train_figures(data["a"], data["pred"], data["importances"], list(TARGETS)).values():
        assert _png_width(fig) >= 1200


def _empty_axes(fig: Figure) -> list[str]:
    """Visible axes without a data artist, and legend entries of a series that draws nothing."""
    out = [f"panel {ax.get_xlabel()!r}" for ax in fig.axes
           if ax.get_visible() and not (ax.lines or ax.collections or ax.patches)]
    for ax in fig.axes:
        for h, label in zip(*ax.get_legend_handles_labels()):
            if hasattr(h, "get_xdata") and len(h.get_xdata()) == 0:
                out.append(f"legend {label!r}")
    return out


def test_characterize_without_energy_draws_no_empty_panel_and_names_what_is_missing():
    a = synthetic_dataset(80, seed=3, device_name="Dev A", energy=False, telemetry=False)
    b = synthetic_dataset(80, seed=3, device_name="Dev B", energy=False, telemetry=False)
    figs, skipped = pc.characterize_figures(characterize_tables(a, b), dev_a="Dev A", dev_b="Dev B")
    assert {"knobs_latency_ms", "knobs_peak_memory_MB", "divergence", "cross_device"} <= set(figs)
    assert "knobs_energy_J" in skipped and "efficiency" in skipped
    for name, fig in figs.items():
        assert not _empty_axes(fig), (name, _empty_axes(fig))
        texts = [ax.get_xlabel() + ax.get_ylabel() + ax.get_title() for ax in fig.axes]
        assert not any("MiB" in t for t in [*texts, fig.get_suptitle(), fig.get_supxlabel()]), name
        assert not any("energy" in t for t in texts), name   # nothing drawn for the unmeasured target
    assert "energy_J" in figs["divergence"].get_supxlabel()
    assert "energy_J" in figs["cross_device"].get_supxlabel()
    assert "peak memory (MB)" in figs["knobs_peak_memory_MB"].get_suptitle()


def test_basic_imagenet_depths_alone_are_one_family_beside_bottleneck():
    """Only 18/34 for the basic family (as in timm): one basic curve, no empty series, and the caption
    says the depth axis holds two block families."""
    from carb.analysis.characterize.knobs import knob_medians
    from carb.design.arch import ArchConfig
    from carb.design.features import grid_features

    cfgs = [ArchConfig(blk, d, w, 224, b, early_downsample=True) for blk, ds in (("basic", (18, 34)),
            ("bottleneck", (50, 101))) for d in ds for w in (0.5, 1.0) for b in (1, 4)]
    df = grid_features(cfgs).assign(latency_ms=lambda f: f["flops"] / 1e7, peak_memory_MB=1.0, energy_J=np.nan,
                                    status="ok", device_name="Dev A")
    fig = pc.knob_figure(knob_medians(df), "latency_ms")
    assert not _empty_axes(fig), _empty_axes(fig)
    ax = next(a for a in fig.axes if a.get_xlabel().startswith("depth"))
    line = next(ln for ln in ax.lines if ln.get_label() == "basic family")
    assert set(line.get_xdata()) == {18.0, 34.0}
    assert "basic-block" in fig.get_supxlabel() and "bottleneck" in fig.get_supxlabel()


def test_basic_four_stage_depths_are_drawn_apart(data):
    """Depths 18/34 (basic blocks, four ImageNet stages) are not joined to the CIFAR-layout basic line."""
    from carb.analysis.characterize.knobs import knob_medians
    from carb.design.arch import ArchConfig
    from carb.design.features import grid_features

    cfgs = [ArchConfig("basic", d, w, 32, b) for d in (8, 14, 18, 20, 34) for w in (0.5, 1.0) for b in (1, 4)]
    df = grid_features(cfgs).assign(latency_ms=lambda f: f["flops"] / 1e7, peak_memory_MB=1.0, energy_J=np.nan,
                                    status="ok", device_name="Dev A")
    fig = pc.knob_figure(knob_medians(df), "latency_ms")
    ax = next(a for a in fig.axes if a.get_xlabel().startswith("depth"))
    line = next(ln for ln in ax.lines if ln.get_label() == "basic family")
    assert not set(line.get_xdata()) & {18.0, 34.0} and set(line.get_xdata()) == {8.0, 14.0, 20.0}
    assert any("4 ImageNet stages" in t for t in ax.get_legend_handles_labels()[1])
    assert "four ImageNet stages" in fig.get_supxlabel()


def test_residuals_by_tier_has_one_box_per_batch_tier(data):
    fig = pt.residuals_by_tier(data["a"], data["pred"])
    tiers = set(batch_tier(data["a"]["batch_size"].to_numpy()))
    for ax in _data_axes(fig):
        labels = [t.get_text().split("\n")[0] for t in ax.get_xticklabels()]
        assert set(labels) == tiers


def test_importances_figure_lists_the_features_largest_on_top(data):
    fig = pt.importances_figure(data["importances"])
    axes = _data_axes(fig)
    assert [ax.get_title().split(":")[0] for ax in axes] == ["peak_memory_MB", "latency_ms"]
    for ax, t in zip(axes, ("peak_memory_MB", "latency_ms")):
        names = [lbl.get_text() for lbl in ax.get_yticklabels()]
        assert names[::-1] == [n for n, _ in data["importances"][t]]     # bottom-up: last item at the bottom
        assert len(ax.patches) == len(data["importances"][t])


# --------------------------------------------------------------------------- screen

def test_pareto_figure_shows_the_screening_result(data):
    res = data["screen"]
    fig = ps.pareto_figure(res)
    ax = _data_axes(fig)[0]
    counts = res.counts
    texts = _legend_texts(fig)
    assert f"all candidates ({counts['n_candidates']})" in texts
    assert f"feasible ({int(res.scored['feasible'].sum())}: predictions within budget)" in texts
    assert f"Pareto front ({counts['n_pareto']})" in texts
    # the terminal's words and counts: one legend entry per decision that occurs
    for d, n in res.scored["decision"].value_counts().items():
        word = {"borderline": "borderline: profile",
                "unverified": "unverified: outside the domain or unmeasured"}.get(d, d)
        assert f"{word} ({n})" in texts
    # each budget line is labelled with its value and unit, outside the plotting area
    (label,) = [t for t in ax.texts if t.get_text().startswith("budget ")]
    assert label.get_text() == f"budget {res.budget['energy_J']:g} J"
    pos = label.get_position()[1 - res.axes.index("energy_J")]
    assert pos > 1.0 and not label.get_clip_on()
    assert res.objective in ax.get_title()
    # the energy budget is drawn where it is (energy is one of the two Pareto axes)
    axis = res.axes.index("energy_J")
    limit = res.budget["energy_J"]
    budget_lines = [ln for ln in ax.lines if ln.get_linestyle() == "--"]
    coords = [ln.get_xdata()[0] if axis == 0 else ln.get_ydata()[0] for ln in budget_lines]
    assert limit in coords


def test_pareto_figure_marks_out_of_domain_and_unverified(data):
    from carb.model.baselines import FlopsLinear
    from carb.model.domain import fit_domain

    a = data["a"]
    model = FlopsLinear().fit(a, a[list(TARGETS)])
    model.domain_ = fit_domain(a[(a["batch_size"] <= 4) & (a["precision"] == a["precision"].iloc[0])])
    res = screening.screen(a, model, budget={"energy_J": float(a["energy_J"].max() * 10)})
    n_out = int((~res.scored["in_domain"]).sum())
    n_unv = res.counts["n_unverified"]
    assert n_out > 0 and n_unv > 0
    texts = _legend_texts(ps.pareto_figure(res))
    assert f"outside the training domain ({n_out})" in texts
    assert f"unverified: outside the domain or unmeasured ({n_unv})" in texts


# --------------------------------------------------------------------------- tune

def test_history_figure_draws_the_best_so_far():
    fig = ptu.history_figure([3, 0, 4, 1, 2], [4.0, 5.0, 2.5, 6.0, 3.0], "mae", "study")
    ax = fig.axes[0]
    (best,) = [ln for ln in ax.lines if ln.get_label() == "best so far"]
    assert list(best.get_xdata()) == [0, 1, 2, 3, 4]
    assert list(best.get_ydata()) == [5.0, 5.0, 3.0, 3.0, 2.5]
    assert "mae" in ax.get_ylabel()
    fig = ptu.history_figure([0, 2, 3], [4.0, 3.0, 5.0], "mae", "s.latency_ms.xgb", target="latency_ms", pruned=[1, 4])
    ax = fig.axes[0]
    assert ax.get_ylabel() == "validation mae of latency_ms (ms)"
    (pr,) = [ln for ln in ax.lines if ln.get_label() == "pruned trial (2)"]
    assert list(pr.get_xdata()) == [1.0, 4.0]
    assert ptu._metric_label("mape", "energy_J") == "validation mape of energy_J (%)"
    empty = ptu.history_figure([], [], "mae", "no trials yet")
    assert len(_png(empty)) > 0


def test_tune_importance_figure_puts_the_largest_on_top():
    fig = ptu.importance_figure({"b": 0.1, "a": 0.6, "c": 0.3}, "study")
    ax = fig.axes[0]
    bars = sorted(ax.patches, key=lambda p: p.get_y())
    assert [round(p.get_width(), 6) for p in bars] == [0.1, 0.3, 0.6]   # bottom to top
    assert [t.get_text() for t in ax.get_yticklabels()] == ["b", "c", "a"]


# --------------------------------------------------------------------------- import hygiene

def test_importing_the_plots_neither_sets_a_backend_nor_imports_pyplot():
    code = f"""
import json, sys
import matplotlib
calls = []
matplotlib.use = lambda *a, **k: calls.append([str(x) for x in a])
import importlib
for name in {_plot_modules()!r}:
    importlib.import_module(name)
print(json.dumps({{"use_calls": calls, "pyplot": "matplotlib.pyplot" in sys.modules,
                  "modules": sorted(m for m in sys.modules if m.startswith("carb.plots"))}}))
"""
    r = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert set(_plot_modules()) <= set(out["modules"])
    assert out["use_calls"] == [], f"matplotlib.use called at import: {out['use_calls']}"
    assert out["pyplot"] is False, "importing carb.plots.* imports matplotlib.pyplot"


def _pyplot_uses(path: Path) -> list[str]:
    """Imports of pyplot (or of Optuna's pyplot-based figures) and calls of ``matplotlib.use`` anywhere in
    a module, including lazy ones inside functions."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith(("matplotlib.pyplot", "optuna.visualization"))]
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if mod.startswith(("matplotlib.pyplot", "optuna.visualization")) or \
                    (mod == "matplotlib" and any(a.name in ("pyplot", "use") for a in node.names)):
                found.append(f"from {mod} import {', '.join(a.name for a in node.names)}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "use" \
                and isinstance(node.func.value, ast.Name) and node.func.value.id in ("matplotlib", "mpl"):
            found.append(f"{node.func.value.id}.use(...) at line {node.lineno}")
    return found


def test_the_pyplot_detector_fires(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import matplotlib\nmatplotlib.use('Agg')\n\ndef f():\n    import matplotlib.pyplot as plt\n"
                   "    from matplotlib import pyplot\n    from optuna.visualization.matplotlib import plot_slice\n"
                   "    return plt\n")
    assert len(_pyplot_uses(bad)) == 4
    good = tmp_path / "good.py"
    good.write_text('"""No pyplot here."""\nfrom matplotlib.figure import Figure\nimport matplotlib as mpl\n'
                    'x = mpl.rcParams\n')
    assert _pyplot_uses(good) == []


def test_no_figure_function_uses_pyplot_or_sets_a_backend():
    """Not at import time and not lazily inside a function either (Figure + Agg canvas only)."""
    uses = {p.name: _pyplot_uses(p) for p in sorted(Path(carb.plots.__file__).parent.glob("*.py"))}
    assert len(uses) >= 2
    assert {k: v for k, v in uses.items() if v} == {}


def test_extrapolation_figure_has_a_panel_per_target_and_split_with_both_r2s(data):
    """One panel per (target, split) with CARB and B1 drawn and both R^2 in the title; B1 predictions
    at or below 0 (a FLOPs line's intercept can be negative) are counted in the legend, not dropped silently."""
    xval = {k: v.copy() for k, v in data["xval"].items()}
    xval["depth"].loc[:2, "b1_pred_latency_ms"] = -1.0
    fig = pt.extrapolation_figure(xval, data["xval_table"])
    axes = _data_axes(fig)
    assert len(axes) == len(TARGETS) * 2
    titles = [ax.get_title() for ax in axes]
    assert all("R² CARB" in t and "B1" in t and "inside CARB's interval 0.85" in t for t in titles)
    assert sum("train lower" in t for t in titles) == 2          # the split's description heads its column
    assert any("3 at <= 0 not drawn" in t for t in _legend_texts(fig))
    from carb.analysis.evaluate import regression_metrics

    d = xval["batch"]
    r2 = regression_metrics(d["latency_ms"], d["pred_latency_ms"])["r2"]
    assert any(f"R² CARB {r2:.3f}" in t for t in titles if t.startswith(("train", "batch")) and "latency" in t)
    empty = pt.extrapolation_figure({})
    assert "no extrapolation split" in [t.get_text() for ax in empty.axes for t in ax.texts]


def test_train_figures_names_each_logged_figure(data):
    """carb-train's figure set: one figure per artifact path, each with labelled axes."""
    import carb.plots.train as pt

    figs = pt.train_figures(data["a"], data["pred"], data["importances"], ["peak_memory_MB", "latency_ms"])
    assert set(figs) == {"figures/pred_vs_measured.png", "figures/importances.png",
                         "figures/residuals_by_batch_tier.png"}
    with_x = pt.train_figures(data["a"], data["pred"], data["importances"], ["latency_ms"], data["xval_table"],
                              data["xval"])
    assert set(with_x) == set(figs) | {"figures/extrapolation.png"}
    for fig in figs.values():
        for ax in fig.axes:
            if ax.has_data():
                assert ax.get_xlabel() and ax.get_ylabel()
