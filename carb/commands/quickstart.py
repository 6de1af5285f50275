"""``carb-quickstart``: the main job on embedded defaults.

On a fresh store (no champion for the dataset's device) it trains the cascade on a shipped dataset with
the fast preset, promotes that version to ``champion``, then screens the default grid against a budget
suited to that dataset and prints the shortlist; the training run's leave-one-batch-tier-out refit and
figures, which neither promote nor the screen reads, follow the shortlist and are logged to that run. When a champion already exists it screens straight
away. ``data=h200`` (default: the NVIDIA H200 measurements, with energy; screening preset
``screen=quickstart``) or ``data=reference`` (the CPU reference, latency and memory only;
``screen=quickstart_cpu``) picks the dataset. Extra arguments are Hydra overrides: ``tracking.*`` and
``paths.*`` apply to every step, anything else to the screening step (e.g. ``space.batch_sizes=[1,8]``).

``calibrate=true`` (CPU only, so it implies ``data=reference``) first probes this CPU when it has no
device probe yet, or one that lacks a precision the reference model predicts (fp16: issue 44)
(``carb-calibrate probe=true``: single convolutions of every such precision, about a minute), then measures K configurations on this
machine's CPU (``carb-calibrate measure=cpu``, K = 12 by default, about a minute on 2 cores), calibrates
the reference model to it, registers the result as this machine's model and screens with that version;
``calibrate.<key>=<value>`` sets any ``carb-calibrate`` setting (e.g. ``calibrate.k=8``).
"""
from __future__ import annotations

import sys
import time
from typing import Any

from carb.commands.cli import compose, wrap_line
from carb.compute import limited, configure_from
from carb.errors import ConfigError

#: shipped dataset (``data=``) -> its screening preset (``conf/screen/<preset>.yaml``)
SCREEN_PRESET = {"h200": "quickstart", "reference": "quickstart_cpu"}
#: the main job's dataset when ``data=`` is not given (``reference`` with ``calibrate=true``)
DEFAULT_DATA = "h200"


def _split(argv: list[str]) -> tuple[list[str], list[str]]:
    common = [a for a in argv if a.split("=", 1)[0].lstrip("+~").startswith(("tracking.", "paths."))]
    rest = [a for a in argv if a not in common]
    return common, rest


def _calibrate_args(argv: list[str]) -> tuple[bool, list[str], list[str]]:
    """``(calibrate?, carb-calibrate overrides, the other arguments)`` from the quickstart's arguments."""
    on, over, rest = False, [], []
    for a in argv:
        key, _, value = a.partition("=")
        if key == "calibrate":
            if value.lower() not in ("true", "false"):
                raise ConfigError(f"calibrate: {value!r} is not allowed; allowed: [true, false]")
            on = value.lower() == "true"
        elif key.startswith("calibrate."):
            over.append(a[len("calibrate."):])
        else:
            rest.append(a)
    return on, over, rest


def _data_arg(argv: list[str], calibrate: bool) -> tuple[str, list[str]]:
    """``(shipped dataset name, the other arguments)``: ``data=<name>`` from the quickstart's arguments
    (one line and exit 2 for a name that is not shipped, or ``data=h200`` with ``calibrate=true``)."""
    data, rest = None, []
    for a in argv:
        key, _, value = a.partition("=")
        if key == "data":
            if value not in SCREEN_PRESET:
                raise ConfigError(f"data: {value!r} is not allowed; allowed: {sorted(SCREEN_PRESET)}")
            data = value
        else:
            rest.append(a)
    if calibrate and data not in (None, "reference"):
        raise ConfigError(f"data: calibrate=true measures this machine's CPU and calibrates the CPU reference "
                          f"model; allowed with calibrate=true: ['reference'], got {data!r}")
    return data or ("reference" if calibrate else DEFAULT_DATA), rest


def probe_first(cal_cfg: Any, calibrate: list[str], precisions: list[str] | None = None) -> None:
    """Set ``probe=true`` in the composed calibrate config when this CPU (fingerprinted at the threads its
    measurements use) has no device probe on disk (shipped or ``carb-probe``'s), or one lacking a precision
    of ``precisions`` (what the source model predicts; :func:`carb.data.probes.missing_precisions`), and the
    user did not set ``calibrate.probe``: the calibration then probes it first (about a minute on 2 cores,
    every precision the source predicts) and calibrates from both CPUs' probes (issues 29, 44). A probe that
    covers them is used as it is."""
    from omegaconf import open_dict

    from carb.measure.probe import torch_threads_and_version
    from carb.data.probes import load_probe, missing_precisions
    from carb.measure.fingerprint import device_id, read_cpu_fingerprint

    if any(a.split("=", 1)[0].lstrip("+~") == "probe" for a in calibrate):
        return
    threads, _ = torch_threads_and_version(cal_cfg.measure.get("threads"))
    probe = load_probe(device_id(read_cpu_fingerprint(threads)))
    lacking = missing_precisions(probe, precisions) if probe is not None and precisions else []
    if probe is None or lacking:
        if lacking:
            print(f"carb-quickstart: this CPU's device probe has no {', '.join(lacking)} timings; probing it again "
                  f"with every precision the model predicts")
        with open_dict(cal_cfg):
            cal_cfg.probe = True


def composed_first(name: str, common: list[str], screen_overrides: list[str],
                   calibrate: list[str] | None = None, data: str = DEFAULT_DATA,
                   precisions: list[str] | None = None) -> dict[str, Any]:
    """Compose and check the train, promote and screen configs before anything runs: a typo is one
    line (:class:`ConfigError`), not a traceback after training."""
    from carb.commands.checks import check_config
    from carb.commands.cli import check_stores, composition_error_line

    try:
        cfgs = {"train": compose("train", ["model=carb_fast", f"data={data}", *common]),
                "promote": compose("promote", [f"promote.name={name}", *common]),
                "screen": compose("screen", [f"screen={SCREEN_PRESET[data]}", f"screen.target=models:/{name}@champion",
                                             *(["screen.interval_scope=this_session"] if calibrate is not None else []),
                                             *common, *screen_overrides])}
        if calibrate is not None:
            cfgs["calibrate"] = compose("calibrate", ["measure=cpu", "device=cpu",
                                                      f"source=models:/{name}@champion", *common, *calibrate])
    except Exception as e:  # noqa: BLE001 - Hydra's and OmegaConf's composition errors become one line
        if not (type(e).__module__ or "").startswith(("hydra", "omegaconf")):
            raise
        raise ConfigError(composition_error_line(e, "screen", [*common, *screen_overrides])) from None
    check_config("train", cfgs["train"])
    check_config("screen", cfgs["screen"])
    check_stores("train", cfgs["train"])   # a damaged or read-only store: one line before any work
    if "calibrate" in cfgs:
        check_config("calibrate", cfgs["calibrate"])
        probe_first(cfgs["calibrate"], calibrate or [], precisions)
    return cfgs


def run_quickstart(argv: list[str] | None = None) -> dict[str, Any]:
    """Train (if needed) -> promote -> screen -> the rest of the training run's evaluation (the
    leave-one-batch-tier-out refit and the figures, which neither promote nor the screen reads, logged to
    the same run after the shortlist is shown). Returns the screening summary plus what was done."""
    from carb import tracking
    from carb.commands.promote import run_promote
    from carb.commands.screen import run_screen
    from carb.commands.train import finish_deferred, run_train
    from carb.data.io import reference_dataset
    from carb.data.schema import model_name, ok_rows

    calibrate, cal_overrides, argv = _calibrate_args(list(argv or []))
    data, argv = _data_arg(argv, calibrate)
    common, screen_overrides = _split(argv)
    t0 = time.perf_counter()
    ref = reference_dataset(data)
    device = str(ref["device_name"].iloc[0])
    name = model_name(ok_rows(ref))
    precisions = sorted(ok_rows(ref)["precision"].astype(str).unique())   # what the model trained on it predicts
    cfgs = composed_first(name, common, screen_overrides, cal_overrides if calibrate else None, data,
                          precisions)  # mistakes first
    cfg = cfgs["screen"]
    configure_from(cfgs["train"].get("compute"))   # threads that fit the free cores (carb/compute.py)
    print(wrap_line(f"carb-quickstart: tracking store {cfg.tracking.uri}"))
    tracking.configure(cfg.tracking.uri, cfg.tracking.get("artifact_root"))
    steps, trained = [], {}
    if tracking.get_alias(name, "champion") is None:
        print(wrap_line(f"carb-quickstart: no champion for {name} in {cfg.tracking.uri}; training the fast preset "
              f"on the shipped dataset data={data} ({len(ref)} rows measured on {device})"))
        trained = run_train(cfgs["train"], defer=True)   # the shortlist first; what screening does not read, after it
        steps.append("train")
        run_promote(cfgs["promote"])
        steps.append("promote")
    else:
        print(wrap_line(f"carb-quickstart: {name}@champion exists (version {tracking.get_alias(name, 'champion')}); "
              f"screening straight away"))
    if calibrate:
        from carb.commands.calibrate import run_calibrate

        print(wrap_line(f"carb-quickstart: calibrating {name}@champion to this machine "
              f"({int(cfgs['calibrate'].k)} measured configurations)"))
        cal = run_calibrate(cfgs["calibrate"])
        steps.append("calibrate")
        if cal.get("version"):
            from omegaconf import open_dict

            with open_dict(cfg):
                cfg.screen.target = f"models:/{cal['registered_name']}/{cal['version']}"
            print(wrap_line(f"carb-quickstart: screening with this machine's model {cfg.screen.target}"))
    out = run_screen(cfg)
    steps.append("screen")
    print(wrap_line(f"carb-quickstart: first shortlist after {time.perf_counter() - t0:.1f} s"))
    later = trained.get("deferred")
    if later:
        added = finish_deferred(later)
        lobo = ", ".join(f"{k[5:-3]} {v:.3f}" for k, v in added.items() if k.startswith("lobo_") and k.endswith("_r2"))
        print(wrap_line(f"carb-quickstart: then {' and '.join(later['parts'])} logged to the training run {later['run_id']}"
              + (f" (leave-one-batch-tier-out R2: {lobo})" if lobo else "")))
    uri = cfg.tracking.uri
    after = [f"then {', '.join(later['parts'])}"] if later else []
    print(wrap_line(f"carb-quickstart: done in {time.perf_counter() - t0:.0f} s ({' -> '.join(steps + after)})."))
    print("\n".join(ui_lines(uri, out.get("run_id", ""))))
    return {**out, "steps": steps, "after_shortlist": list(later["parts"]) if later else []}


def ui_lines(uri: str, run_id: str) -> list[str]:
    """The closing lines: how to start the MLflow UI on ``uri`` (wrapped at 120 columns, the command as this
    process can run it), and last the screening run's page in the "Model training" view (MLflow 3 otherwise
    opens its GenAI home), or the screening experiment's runs table when the run has no page."""
    from carb import tracking
    from carb.commands.cli import command_text, wrap_command

    env = "MLFLOW_DISABLE_TELEMETRY=true DO_NOT_TRACK=1 MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false"
    note = "   (or make ui)" if uri == "sqlite:///mlruns/mlflow.db" else ""
    lines = wrap_command("Open the MLflow UI:  ", f"{env} {command_text('mlflow')} ui --workers 1 --backend-store-uri {uri}",
                         note)
    url = tracking.run_url(run_id, uri) or tracking.experiment_url(tracking.EXPERIMENTS["screen"], tracking.ui_base(uri))
    return lines + [f"then open {url}"]


def help_text() -> str:
    """``carb-quickstart --help``: what it does, its own arguments, and the groups and keys of the
    screening step's config (the keys any other argument may set)."""
    from omegaconf import OmegaConf

    cfg = compose("screen", [f"screen={SCREEN_PRESET[DEFAULT_DATA]}"])
    groups = ", ".join(str(k) for k in cfg.keys())
    return "\n".join([
        "carb-quickstart [data=h200|reference] [calibrate=true|false] [calibrate.<key>=<value>] "
        "[<group>.<key>=<value> ...]",
        "", (__doc__ or "").strip(), "",
        "Arguments:",
        "  data=h200 (default) | reference   the shipped dataset to train on and screen with",
        "  calibrate=true                    measure this CPU, calibrate the CPU reference model "
        "(implies data=reference)",
        "  calibrate.<key>=<value>           any carb-calibrate setting (carb-calibrate --help)",
        "  tracking.<key>, paths.<key>       every step; anything else goes to the screening step",
        "", f"== Configuration groups ==\nof the screening step: {groups}", "",
        "== Config ==\nthe screening step's (data=h200), as the quickstart sets it:",
        OmegaConf.to_yaml(cfg).rstrip()])


def main() -> None:
    from carb.commands.cli import concise_warnings, one_line_errors, quote_values, telemetry_off, terminate_as_interrupt
    from carb.commands.progress import heartbeats

    concise_warnings()
    telemetry_off()
    if any(a in ("--help", "-h") for a in sys.argv[1:]):
        print(help_text())
        return
    terminate_as_interrupt()
    with one_line_errors("quickstart"), limited(), heartbeats():   # Ctrl-C, SIGTERM, a full disk: one line each
        run_quickstart(quote_values(sys.argv[1:], "quickstart"))   # data.device='Titan X (Pascal)' as typed


if __name__ == "__main__":
    main()
