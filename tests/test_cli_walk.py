"""A new user's walk through the zoo and screening paths (README, docs/COMMANDS.md): each bad input found on
the walk is one line naming the field or the network and the allowed values or the reason, never a library
traceback; inside a grid the refused networks are left out and listed, the others scored."""
from __future__ import annotations

import re
from types import SimpleNamespace

import pandas as pd
import pytest

from carb.analysis.predictor import Predictor, zoo_knobs
from carb.design.zoo_space import zoo_configs
from carb.errors import ConfigError, ZooError

SPACE = {"name": "t", "kind": "zoo", "mode": "grid", "seed": 0, "max_flops": 1e12,
         "models": ["tv:resnet18", "tv:vit_b_16"], "input_sizes": [160, 224], "batch_sizes": [1],
         "precisions": ["fp32"]}


def _flops_of(name: str, size: int) -> float:
    """A tracer stand-in: ViT-B/16 refuses every size but 224 (as torchvision's does), tv:broken every size."""
    if name == "tv:broken" or (name == "tv:vit_b_16" and size != 224):
        raise ZooError(f"model {name!r}: refuses the input: Wrong image height! Expected 224 but got {size}!")
    return 1e9


@pytest.mark.parametrize("kw,needle", [({"precision": "fp8"}, r"precision: 'fp8' is not allowed; allowed: \["),
                                       ({"batch_size": "abc"}, "batch_size: must be a positive integer"),
                                       ({"input_size": -1}, "input_size: must be a positive integer")])
def test_predict_knob_typos_are_one_line(kw, needle):
    """``model.predict(names, precision="fp8")`` named the knob only for sizes; fp8 reached the regressor
    (sklearn: "Found array with 0 sample(s)")."""
    with pytest.raises(ConfigError, match=needle):
        zoo_knobs(["tv:resnet18"], **kw)
    frame = pd.DataFrame({"model_name": ["tv:resnet18"], **{k: [v] for k, v in kw.items()}})
    with pytest.raises(ConfigError, match=needle):   # a frame's own column too
        zoo_knobs(frame)


@pytest.mark.parametrize("names,needle", [(["tv:resnet5000"], "^model 'tv:resnet5000': unknown torchvision"),
                                          (["bert-base-uncased", "tv:r3d_18"],
                                           "^every network was refused: model 'bert-base-uncased': unknown model.*"
                                           "model 'tv:r3d_18': a torchvision video model")])
def test_predict_every_network_refused_is_one_line(names, needle):
    """Every network refused (unknown, not a classifier): the tracer's reason, not sklearn's empty-array error."""
    model = Predictor(SimpleNamespace(input_kind_="zoo"), "models:/zoo-test/1")
    with pytest.raises(ConfigError, match=needle) as e:
        model.predict(names, batch_size=1)
    assert "\n" not in str(e.value)


def test_a_size_one_network_refuses_leaves_its_other_sizes():
    """ViT-B/16 at 160 and 224 with a FLOPs cap: 224 is kept, the refusal names the size (it dropped the
    network at every size and said 'refused tv:vit_b_16')."""
    cfgs, refused = zoo_configs(SPACE, flops_of=_flops_of)
    assert {(c.model_name, c.input_size) for c in cfgs} == {("tv:resnet18", 160), ("tv:resnet18", 224),
                                                            ("tv:vit_b_16", 224)}
    assert list(refused) == ["tv:vit_b_16 at input 160"] and "Expected 224 but got 160" in refused["tv:vit_b_16 at input 160"]


def test_a_zoo_space_whose_every_network_is_refused_is_one_line():
    """Was 'space: the zoo space yields no configurations (refused: {...})', a dict's repr."""
    with pytest.raises(ConfigError) as e:
        zoo_configs({**SPACE, "models": ["tv:broken"]}, flops_of=_flops_of)
    assert str(e.value).startswith("space.models: model 'tv:broken': refuses the input") and "{" not in str(e.value)
    with pytest.raises(ConfigError) as e:
        zoo_configs({**SPACE, "models": ["tv:broken", "tv:vit_b_16"], "input_sizes": [160]}, flops_of=_flops_of)
    assert str(e.value).startswith("space.models: every network was refused: tv:broken: refuses the input")
    assert "; tv:vit_b_16: refuses the input" in str(e.value) and "{" not in str(e.value)


def test_every_network_refusing_its_input_names_input_sizes_of():
    """Every network refused at the sizes asked (ViT-B/16 at 160): the line gave the tracer's reason but not the
    setting that fixes it; it now names space.input_sizes_of. A refusal of another kind gets no such hint."""
    with pytest.raises(ConfigError) as e:
        zoo_configs({**SPACE, "models": ["tv:vit_b_16"], "input_sizes": [160]}, flops_of=_flops_of)
    assert "refuses the input" in str(e.value) and "space.input_sizes_of" in str(e.value)
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError) as e:
        zoo_configs({**SPACE, "models": ["tv:broken", "tv:vit_b_16"], "input_sizes": [160]}, flops_of=_flops_of)
    msg = str(e.value)
    assert msg.startswith("space.models: every network was refused:") and "space.input_sizes_of" in msg
    from carb.design.zoo_space import all_refused     # a grid file's sizes come from its own column
    line = all_refused({"tv:vit_b_16": "model 'tv:vit_b_16': refuses the input"}, "the file's input_size column")
    assert line.endswith("gets them from the file's input_size column)") and "input_sizes_of" not in line

    def unknown(name: str, size: int) -> float:
        raise ZooError(f"model {name!r}: unknown model")
    with pytest.raises(ConfigError) as e:
        zoo_configs({**SPACE, "models": ["tv:nope"]}, flops_of=unknown)
    assert "input_sizes_of" not in str(e.value)


def test_pareto_on_a_cost_the_model_does_not_predict_says_so():
    """'screen.pareto=[energy_J_per_image,-top1]' on a CPU zoo model (no energy) said "not a column of the
    candidates", as if misspelt."""
    from carb.analysis.axes import parse_axes

    frame = pd.DataFrame({"top1": [0.7], "flops": [1e9]})
    with pytest.raises(ConfigError, match=r"^screen.pareto: 'energy_J_per_image' is not predicted by the target "
                                          r"model \(it predicts \['peak_memory_MB', 'latency_ms'\]\)"):
        parse_axes(["energy_J_per_image", "-top1"], frame, ["peak_memory_MB", "latency_ms"])
    with pytest.raises(ConfigError, match="is not a column of the candidates"):   # a typo stays a typo
        parse_axes(["top_1"], frame, ["peak_memory_MB", "latency_ms"])


def test_next_steps_of_a_zoo_model_name_networks_and_its_targets():
    """The closing 'next:' block of a CPU zoo screen offered an energy budget (no energy stage), a knob frame
    to predict (a zoo model refuses one) and carb-calibrate (which stops on a zoo model's features)."""
    from carb.commands.screen_table import next_steps

    text = "\n".join(next_steps("models:/carb-x-zoo@champion", "sqlite:///m.db", kind="cpu",
                                targets=["peak_memory_MB", "latency_ms"], zoo=True))
    assert "screen.budget.energy_J" not in text and "screen.budget.latency_ms=<ms>" in text
    assert "knobs_frame" not in text and ".predict(['tv:resnet50', 'timm:ghostnet_100']," in text
    assert "carb-calibrate" not in text and "space=zoo device=cpu measure=cpu" in text
    resnet = "\n".join(next_steps("models:/carb-x@champion", "sqlite:///m.db", kind="cpu"))
    assert "screen.budget.energy_J=<J>" in resnet and "predict(knobs_frame" in resnet and "carb-calibrate" in resnet


def test_help_lists_only_the_groups_a_command_takes():
    """`carb-screen --help` listed every group of conf/ (data, model, features, importer, ...); `carb-screen
    data=h200` then stopped with 'data: unknown key'."""
    from carb.commands.cli import command_groups, help_override, help_template

    screen = dict(command_groups("screen"))
    assert set(screen) == {"compute", "experiment", "paths", "progress", "screen", "space", "tracking"}
    assert screen["experiment"] == ["two_stage"] and "zoo" in screen["space"]
    train = dict(command_groups("train"))
    assert {"data", "features", "model", "split", "prior"} <= set(train) and train["experiment"] == ["ablation", "lobo"]
    assert "importer" not in train and "importer" in dict(command_groups("import"))
    text = help_template("screen")
    assert "\ndata:" not in text and "\nspace: " in text and "$CONFIG" in text
    assert help_override("screen", ["--help"])[-1] == "hydra.help.template=${carb_help:screen}"
    assert help_override("screen", ["space=zoo"]) == ["space=zoo"]


def test_screen_help_end_to_end():
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "carb.screen", "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    groups = r.stdout.split("== Configuration groups ==")[1].split("== Config ==")[0]
    assert "space: " in groups and "\ndata: " not in groups and "\nimporter: " not in groups
    assert "\nspace:\n  name: screening" in r.stdout                 # the composed config still follows


def test_a_model_uri_that_names_nothing_lists_the_registered_ones(monkeypatch):
    from carb.commands import screen

    monkeypatch.setattr(screen.tracking, "registered_models", lambda: ["carb-a-zoo", "other"])
    assert screen.registered_hint("Registered Model with name=carb-nope not found") == "; registered: ['carb-a-zoo']"
    assert screen.registered_hint("the store is damaged") == ""


def test_a_zoo_grid_file_scores_named_networks(tmp_path):
    """`screen.grid_file=` with a model_name column was refused ("unknown knob column(s) ['model_name']"):
    a zoo model had no way to score a user's own list of networks with their own columns."""
    from carb.analysis.zoo_screen import zoo_grid_candidates
    from carb.commands.screen import is_zoo_grid

    path = tmp_path / "nets.csv"
    pd.DataFrame({"model_name": ["tv:resnet18", "no_such_net", "tv:resnet18"], "input_size": [32, 32, 64],
                  "cost_usd": [3.0, 4.0, 5.0]}).to_csv(path, index=False)
    assert is_zoo_grid(path) and not is_zoo_grid(tmp_path / "missing.csv")
    cand, refused = zoo_grid_candidates(str(path), {"precision": "bf16"})
    assert list(cand["input_size"]) == [32, 64] and list(cand["cost_usd"]) == [3.0, 5.0]
    assert (cand["batch_size"] == 1).all() and (cand["precision"] == "bf16").all() and (cand["flops"] > 0).all()
    assert list(refused) == ["no_such_net"] and "unknown model" in refused["no_such_net"]
    bad = tmp_path / "bad.csv"
    pd.DataFrame({"model_name": ["tv:resnet18"], "precision": ["fp8"]}).to_csv(bad, index=False)
    with pytest.raises(ConfigError, match=r"^screen.grid_file bad.csv: precision: 'fp8' is not allowed"):
        zoo_grid_candidates(str(bad))
    none = tmp_path / "none.csv"
    pd.DataFrame({"model_name": ["no_such_net"]}).to_csv(none, index=False)
    with pytest.raises(ConfigError, match=r"^screen.grid_file none.csv: model 'no_such_net': unknown model"):
        zoo_grid_candidates(str(none))


def test_a_network_built_for_one_size_says_it_kept_its_own():
    """`space.input_sizes=[160]` with timm:vit_tiny_patch16_224 screened it at 224 without a word."""
    from carb.commands.screen import own_sizes_note

    space = {"models": ["tv:resnet18", "timm:vit_tiny_patch16_224"], "input_sizes": [160],
             "input_sizes_of": {"timm:vit_tiny_patch16_224": [224], "tv:inception_v3": [160, 224]}}
    note = own_sizes_note(space)
    assert note.startswith("timm:vit_tiny_patch16_224 at [224]: their own input sizes") and "[160]" in note
    assert own_sizes_note({**space, "input_sizes": [160, 224]}) == ""   # its size is among those asked for


def test_commands_hide_torchvisions_init_notice():
    import warnings

    from carb.commands.cli import concise_warnings

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        concise_warnings()
        warnings.warn("The default weight initialization of GoogleNet will be changed in future releases", FutureWarning)
        warnings.warn("something else", UserWarning)
    assert [str(w.message) for w in seen] == ["something else"]


def test_a_resnet_model_refuses_named_networks_before_tracing(monkeypatch, tmp_path):
    """`carb-screen screen.target=<H200 ResNet model> space=zoo` traced the space, then stopped with
    "feature set 'full' needs column(s) ['block', 'depth', ...] that the prediction data lacks"."""
    from carb.commands import screen
    from carb.commands.cli import compose

    monkeypatch.setattr(screen.tracking, "registered_models", lambda: ["carb-a-zoo", "carb-b"])
    resnet, zoo = SimpleNamespace(input_kind_="resnet"), SimpleNamespace(input_kind_="zoo")
    with pytest.raises(ConfigError, match=r"^screen.target: models:/carb-b/1 was trained on ResNet knobs .* cannot "
                                          r"score space=zoo .*registered: \['carb-a-zoo'\]"):
        screen.check_model_takes_grid(compose("screen", ["space=zoo"]), "models:/carb-b/1", resnet)
    nets = tmp_path / "nets.csv"
    nets.write_text("model_name\ntv:resnet18\n")
    with pytest.raises(ConfigError, match="cannot score screen.grid_file nets.csv"):
        screen.check_model_takes_grid(compose("screen", [f"screen.grid_file={nets}"]), "models:/carb-b/1", resnet)
    screen.check_model_takes_grid(compose("screen", []), "models:/carb-b/1", resnet)        # ResNet grid: fine
    screen.check_model_takes_grid(compose("screen", ["space=zoo"]), "models:/carb-a-zoo/1", zoo)


@pytest.mark.parametrize("name,near", [("tv:resnet5000", "; closest: tv:resnet50"),
                                       ("tv:mobilenetv2", "; closest: tv:mobilenet_v2"),
                                       ("timm:ghostnet100", "; closest: timm:ghostnet_100")])
def test_an_unknown_name_suggests_the_closest(name, near):
    """'unknown torchvision classifier; allowed: torchvision.models.list_models(...)' gave no allowed value
    to copy; a misspelt name now gets the nearest real ones."""
    from carb.design.zoo import resolve

    with pytest.raises(ZooError, match=f"^model {name!r}: unknown .*{near}"):
        resolve(name)
    with pytest.raises(ZooError) as e:
        resolve("bert-base-uncased")              # nothing near: no suggestion, still one line
    assert "closest" not in str(e.value) and "\n" not in str(e.value)


def test_an_unknown_timm_name_names_only_timm():
    """'timm:ghostnet100' was refused with 'allowed: torchvision classifiers ('tv:<name>') or timm models':
    the user named timm, so the line names timm's list only (as 'tv:' names get torchvision's only)."""
    from carb.design.zoo import resolve

    with pytest.raises(ZooError) as e:
        resolve("timm:ghostnet100")
    msg = str(e.value)
    assert msg.startswith("model 'timm:ghostnet100': unknown model; allowed: timm models (timm.list_models())")
    assert "torchvision" not in msg and "; closest: timm:ghostnet_100" in msg and "\n" not in msg


def test_train_says_what_the_interval_width_is():
    """carb-train printed 'latency_ms 0.905 (width 0.70)': a width without its unit (it is a share of the
    prediction, (hi - lo) / prediction)."""
    from carb.commands.train import coverage_line

    line = coverage_line({"interval_nominal": 0.9, "interval_test_latency_ms_coverage": 0.905,
                          "interval_test_latency_ms_width": 0.7})
    assert "latency_ms 0.905 (mean width 70.0 % of the prediction)" in line and "(nominal 0.90)" in line
    assert coverage_line({"test_latency_ms_r2": 0.9}) == ""


@pytest.mark.parametrize("override,hint", [("space.models=tv:resnet18", " (a list: space.models=[tv:resnet18])"),
                                           ("space.batch_sizes=8", " (a list: space.batch_sizes=[8])"),
                                           ("space.precisions=bf16", " (a list: space.precisions=[bf16])"),
                                           ("space.precisions=fp8", "")])
def test_one_value_for_a_list_key_shows_the_list(override, hint):
    """`space.models=tv:resnet18` said only 'must be a non-empty list of texts'; the line now shows the
    brackets (not for a value that would be refused inside them too)."""
    from carb.commands.checks import check_config
    from carb.commands.cli import compose

    with pytest.raises(ConfigError) as e:
        check_config("screen", compose("screen", ["space=zoo", override]))
    assert str(e.value).endswith(f"got {override.split('=')[1]!r}{hint}".replace("'8'", "8"))


def test_next_screening_lines_name_the_model_and_the_zoo_space():
    """The 'next:' block after `carb-screen screen.target=models:/<zoo>/1 space=zoo ...` offered
    `carb-screen screen.budget.latency_ms=<ms>`: pasted, it screened the ResNet grid with the default target (the
    only champion: none after `carb-train`, another model's in a store of several), which a zoo model refuses."""
    from carb.commands.screen_table import next_steps

    lines = "\n".join(next_steps("models:/carb-x-zoo/1", "sqlite:///m.db", kind="cpu",
                                 targets=["peak_memory_MB", "latency_ms"], zoo=True)).replace(" \\\n", " ")
    for key in ("your budget", "your grid"):
        line = next(ln for ln in lines.splitlines() if key in ln)
        assert "space=zoo" in line and "screen.target=models:/carb-x-zoo/1" in line, line
    resnet = "\n".join(next_steps("models:/carb-x/2", "sqlite:///m.db", kind="cpu")).replace(" \\\n", " ")
    budget = next(ln for ln in resnet.splitlines() if "your budget" in ln)
    assert "screen.target=models:/carb-x/2" in budget and "space=zoo" not in budget


def test_a_grid_mostly_outside_the_domain_says_where_the_rows_are():
    """`carb-screen space=zoo` on timm's RTX 4090 model: all 480 candidates outside (timm's rows are fp16 at
    batches up to 1024; the zoo grid is batch 1-2), and the reasons (`flops < 2.7e+10`) named no knob to change."""
    from carb.commands.screen import domain_hint
    from carb.model.domain import fit_domain

    rows = pd.DataFrame({"batch_size": [64, 256, 1024], "input_size": [224, 288, 384],
                         "precision": ["fp16"] * 3, "flops": [3e10, 2e11, 9e11]})
    hint = domain_hint(fit_domain(rows), n_inside=0, n_candidates=480)
    assert hint is not None
    for needle in ("batch_size 64-1024", "input_size 224-384", "precision fp16", "flops 3.0e+10-9.0e+11",
                   "space.batch_sizes", "space.precisions"):
        assert needle in hint, needle
    assert domain_hint(fit_domain(rows), n_inside=300, n_candidates=480) is None   # mostly inside: quiet


def test_calibrate_k0_alone_names_the_key_k():
    """`carb-calibrate k=0` on this CPU said `config: k=0 needs spec=...`: a model validator's error has no
    location, so it was put under 'config', which is no key; it names `k` now."""
    from carb.commands.checks import check_config
    from carb.commands.cli import compose

    with pytest.raises(ConfigError) as e:
        check_config("calibrate", compose("calibrate", ["k=0"]))
    assert str(e.value).startswith("k: k=0 needs spec=") and "\n" not in str(e.value)


def test_train_says_how_to_screen_the_new_zoo_version():
    """After `carb-train data=timm_zoo data.device='RTX 4090'` a new user had a model name and nothing to run;
    `carb-screen ...@champion` then failed (a new model has no champion) and without `space=zoo` the default
    ResNet grid is refused by a zoo model."""
    from carb.commands.train import train_next

    text = re.sub(r" \\\n *", " ", "\n".join(train_next("carb-rtx-4090-timm-zoo", 1, "zoo")))
    assert "space=zoo screen.target=models:/carb-rtx-4090-timm-zoo/1 screen.budget.latency_ms=<ms>" in text
    assert "carb-promote promote.name=carb-rtx-4090-timm-zoo" in text
    assert "space=zoo" not in "\n".join(train_next("carb-x", 2, "resnet"))


def test_a_new_model_without_champion_says_which_version_to_name(monkeypatch):
    """`carb-screen screen.target=models:/<new zoo model>@champion` right after carb-train listed the
    registered models, the named one among them, and left the user to guess that it has no champion yet."""
    from carb.commands import screen

    monkeypatch.setattr(screen.tracking, "registered_models", lambda: ["carb-a-zoo"])
    monkeypatch.setattr(screen.tracking, "model_versions", lambda name: [{"version": "1"}, {"version": "2"}])
    hint = screen.registered_hint("Registered model alias champion not found.", "models:/carb-a-zoo@champion")
    assert "models:/carb-a-zoo/2" in hint and "carb-promote promote.name=carb-a-zoo" in hint
