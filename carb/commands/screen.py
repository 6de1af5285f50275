"""``carb-screen``: screen a design space with registered CARB models (paper Section 7).

Enumerates a grid (``space=...`` or ``screen.grid_file=...``), scores it with the target model
(``screen.target=models:/carb-<device>@champion``), optionally ranks it first with a source model
(``screen.source=...``, two-stage), applies the budget, extracts the Pareto front, flags borderline
candidates, prints the shortlist, writes the scored grid (parquet + CSV) and a Pareto figure, and logs
all of it to one MLflow run. ``screen.validate=<dataset>`` also checks budget decisions on measured
configurations (Section 7.3).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd

from carb import tracking
from carb.analysis import screening
from carb.analysis.hj_score import HJ_SCORE
from carb.commands.cli import (hydra_command, hydra_run_dir, say_run_page, sweep_suffix, sweep_tags, to_dict,
                              wrap_line)
from carb.commands.progress import Progress
from carb.commands.runinfo import grid_frame, grid_source, screen_record
from carb.compute import estimator_threads
from carb.commands.screen_table import TABLE_WIDTH, budget_text, file_frame, format_table, next_steps
from carb.design.identity import model_input_kind
from carb.errors import ConfigError, ModelError
from carb.files import write_atomic
from carb.model.device_check import other_device
from carb.model.encoding import pred_name


def default_target(tracking_uri: str, artifact_root: str | None = None) -> str:
    """``models:/<name>@champion`` for the only registered CARB model with a champion."""
    tracking.configure(tracking_uri, artifact_root)
    names = [n for n in tracking.registered_models() if n.startswith("carb-")]
    with_champion = [n for n in names if tracking.get_alias(n, "champion")]
    if len(with_champion) == 1:
        return f"models:/{with_champion[0]}@champion"
    if not with_champion:
        raise ModelError(f"screen.target: not given and no registered model has a 'champion' alias in "
                         f"{tracking_uri} (registered: {names or 'none'}); run carb-train then carb-promote, "
                         f"or give screen.target=models:/<name>@<alias>")
    raise ModelError(f"screen.target: not given and several models have a champion {with_champion}; "
                     f"choose one with screen.target=models:/<name>@champion")


def load_candidates(cfg: Any) -> pd.DataFrame:
    """The candidates as a knob frame (no object per candidate: :mod:`carb.design.candidates`) from
    ``screen.grid_file`` (validated; its extra numeric columns, e.g. ``top1``, passed through) or the
    ``space`` config; with ``screen.accuracy`` the shipped ImageNet top-1 joined on. :func:`screening.screen`
    featurizes it (in its chunk workers for a large grid)."""
    from carb.design.gridfile import read_grid_frame
    from carb.design.space import space_frame
    from carb.design.zoo_space import is_zoo_space

    grid_file = cfg.screen.get("grid_file")
    extras = pd.DataFrame()
    space = to_dict(cfg.space)
    if not grid_file and is_zoo_space(space):   # named networks: featurized from their layer tables, top-1 joined
        from carb.analysis.zoo_screen import refused_lines, zoo_candidates

        note = own_sizes_note(space)
        if note:
            print(wrap_line(f"carb-screen: note: {note}"), file=sys.stderr)
        configs, refused = zoo_candidates(space)
        for line in refused_lines(refused):
            print(f"carb-screen: {line}", file=sys.stderr)
        configs.attrs["refused"] = dict(refused)   # listed in the report and refused.csv (run_screen)
        return configs
    if grid_file and is_zoo_grid(grid_file):   # a grid file of named networks (a model_name column)
        from carb.analysis.zoo_screen import refused_lines, zoo_grid_candidates

        configs, refused = zoo_grid_candidates(grid_file, to_dict(cfg.screen.get("grid_defaults") or {}))
        for line in refused_lines(refused):
            print(f"carb-screen: {line}", file=sys.stderr)
        configs.attrs["refused"] = dict(refused)
        return configs
    if grid_file:
        configs, extras = read_grid_frame(grid_file, to_dict(cfg.screen.get("grid_defaults") or {}))
    else:
        configs = space_frame(space)
    if len(extras.columns):
        configs = pd.concat([configs.reset_index(drop=True), extras.drop(
            columns=[c for c in extras.columns if c in configs])], axis=1)
    if cfg.screen.get("accuracy"):
        from carb.data.accuracy import join_top1

        configs = join_top1(configs, str(cfg.screen.accuracy))
    return configs


def own_sizes_note(space: dict[str, Any]) -> str:
    """A note naming the networks of a zoo space screened at their own input sizes (``space.input_sizes_of``)
    none of which is in ``space.input_sizes`` (``space.input_sizes=[160]`` with ViT-Tiny, built for 224): the
    sizes asked for were not used for them. ``""`` when there is none."""
    asked = {int(s) for s in space.get("input_sizes") or []}
    own = space.get("input_sizes_of") or {}
    models = [str(m) for m in space.get("models") or []]
    odd = {m: sorted(int(s) for s in own[m]) for m in models if m in own and not asked & {int(s) for s in own[m]}}
    if not odd:
        return ""
    listed = ", ".join(f"{m} at {sizes}" for m, sizes in odd.items())
    return (f"{listed}: their own input sizes (space.input_sizes_of), not space.input_sizes {sorted(asked)}; "
            f"space.input_sizes_of.<model>=[...] changes them")


def is_zoo_grid(path: Any) -> bool:
    """Whether the grid file at ``path`` names networks (a ``model_name`` column; its header only is read,
    or a parquet file's schema); False when it cannot be read (the grid reader then says why)."""
    p = Path(str(path))
    try:
        if p.suffix == ".parquet":
            import pyarrow.parquet as pq

            return "model_name" in pq.read_schema(p).names
        return "model_name" in pd.read_csv(p, nrows=0).columns
    except Exception:   # noqa: BLE001 - a missing or unreadable file: read_grid_frame's one line says why
        return False


def load_grid(cfg: Any) -> pd.DataFrame:
    """:func:`load_candidates` featurized (:func:`screening.with_features`), the other columns after the features."""
    return screening.with_features(load_candidates(cfg))


def user_columns(features: pd.DataFrame) -> list[str]:
    """The columns a grid file or ``screen.accuracy`` added to the featurized grid (the user's axes,
    passed through to every output), in order."""
    from carb.design.arch import RECORD_COLUMNS
    from carb.design.features import STATIC_FEATURES

    from carb.design.zoo_features import ZOO_KIND_FEATURES, ZOO_STATIC, ZOO_WEIGHT_FEATURES

    skip = {*RECORD_COLUMNS, *STATIC_FEATURES, "top1_model", *ZOO_STATIC, *ZOO_KIND_FEATURES, *ZOO_WEIGHT_FEATURES}
    return [c for c in features.columns if c not in skip]


def _load(uri: str, role: str) -> Any:
    try:
        model = tracking.load_cascade(uri)
    except ModelError as e:
        raise ModelError(f"screen.{role}: {e}{registered_hint(str(e), uri)}") from None
    model.registry_ = tracking.resolve_version(uri) if uri.startswith("models:/") else {}
    return model


def check_model_takes_grid(cfg: Any, target_uri: str, target: Any) -> None:
    """Raise a one-line :class:`ConfigError` when the grid names networks (``space=zoo`` or a grid file with
    a ``model_name`` column) and the target model was trained on ResNet knobs only (``input_kind_`` "resnet"):
    it has no feature of a named network (it stopped with "feature set 'full' needs column(s) ['block', ...]"
    after tracing the whole space)."""
    from carb.design.zoo_space import is_zoo_space

    if model_input_kind(target) != "resnet":
        return
    grid_file = cfg.screen.get("grid_file")
    if grid_file and is_zoo_grid(grid_file):
        what = f"screen.grid_file {Path(str(grid_file)).name} (a model_name column)"
    elif not grid_file and is_zoo_space(to_dict(cfg.space)):
        what = f"space={cfg.space.get('name', 'zoo')} (named networks)"
    else:
        return
    try:
        zoo = [n for n in tracking.registered_models() if n.startswith("carb-") and n.endswith("-zoo")]
    except Exception:   # noqa: BLE001 - the hint is optional
        zoo = []
    raise ConfigError(f"screen.target: {target_uri} was trained on ResNet knobs (block, depth, width_mult, ...) and "
                      f"cannot score {what}; give a zoo model (screen.target=models:/<zoo model>@champion; "
                      f"registered: {zoo or 'none: carb-train data.path=zoo-cpu'}) or a ResNet space")


def registered_hint(message: str, uri: str = "") -> str:
    """``; registered: [<name>, ...]`` for a model URI that named no registered model or version (``message``:
    the load error), so the line gives the allowed values; for ``models:/<name>@<alias>`` of a registered
    model without that alias (a new model has no ``@champion``), what to give instead: its latest version
    or ``carb-promote promote.name=<name>``; else ``""``."""
    if "not found" not in message.lower() and "does not exist" not in message.lower():
        return ""
    if "alias" in message.lower() and uri.startswith("models:/") and "@" in uri:
        name, alias = uri.removeprefix("models:/").split("@", 1)
        try:
            latest = tracking.model_versions(name)[-1]["version"]
        except Exception:   # noqa: BLE001 - no such model or an unreadable store: the generic hint below
            latest = None
        if latest is not None:
            return (f"; {name} has no @{alias} yet: name a version (models:/{name}/{latest}) or set it with "
                    f"carb-promote promote.name={name}")
    try:
        names = [n for n in tracking.registered_models() if n.startswith("carb-")]
    except Exception:   # noqa: BLE001 - the hint is optional; the load error stands alone
        return ""
    return f"; registered: {names or 'none'}"


def warn_other_device(model: Any, measured: Any, source: str) -> list[str]:
    """Warn (stderr) when the validation data was measured on a device whose fingerprint differs
    from the one the model was trained on; returns the differences (``[]`` when they match or either
    side has no fingerprint)."""
    import json

    from carb.data.schema import device_ids
    from carb.measure.fingerprint import fingerprint_diff

    mine = getattr(model, "device_id_", None)
    ids = device_ids(measured)
    if not mine or not ids or ids == [mine]:
        return []
    other = [i for i in ids if i != mine][0]
    fps = measured.loc[measured["device_id"].astype(str) == other, "device_fingerprint"].dropna()
    try:
        diff = fingerprint_diff(json.loads(model.device_fingerprint_ or "{}"), json.loads(fps.iloc[0]))
    except (ValueError, IndexError):
        diff = []
    diff = diff or [f"device_id: {mine} vs {other}"]
    print(f"carb-screen: warning: the model was trained on device_id {mine}, {source} was measured on "
          f"device_id {other}: {'; '.join(diff)}. Its predictions describe the training device.",
          file=sys.stderr)
    return diff


def _validation(cfg: Any, model: Any, budget: dict[str, float]) -> dict[str, Any]:
    from carb.data.io import load_dataset
    from carb.data.schema import ok_rows
    from carb.data.split import split_dataset

    measured = ok_rows(load_dataset(cfg.screen.validate))
    warn_other_device(model, measured, str(cfg.screen.validate))
    which = cfg.screen.get("validate_split", "all")
    if which == "test":
        seed = int(getattr(model, "split_seed_", 0) or 0)
        fractions = tuple(getattr(model, "split_fractions_", None) or (0.7, 0.15, 0.15))
        measured = split_dataset(measured, seed=seed, fractions=fractions).frames(measured)[2]
        model, _ = screening.scoped_model(model, "this_session")   # held-out rows of the model's own window
    elif which != "all":
        raise ConfigError(f"screen.validate_split: {which!r} is not allowed; allowed: ['all', 'test']")
    if not budget:
        raise ConfigError("screen.validate: needs a budget on at least one measured target "
                          "(screen.budget.<target>=<limit>)")
    return screening.validate(model, measured, budget)


def _coverage(value: Any) -> float | None:
    """``screen.interval_coverage`` as a float in (0, 1), or None (the calibrated coverage)."""
    if value is None:
        return None
    try:
        c = float(value)
    except (TypeError, ValueError):
        c = float("nan")
    if not 0 < c < 1:
        raise ConfigError(f"screen.interval_coverage: must be a number in (0, 1) such as 0.9, got {value!r}")
    return c


#: User columns the terminal table leaves to the files unless screen.pareto, screen.require or
#: screen.objective names them.
FILES_ONLY = ("top5", "top1_source", HJ_SCORE)

#: Candidates scored in the time of one other step (loading the models), for the ETA.
SCORE_ROWS_PER_UNIT = 2000.0
#: Steps that grow with the grid, as parts of its scoring time, for the ETA (a million candidates, two-stage,
#: 2 cores: 36 s from the first featurized chunk to the last scored one; before it 4 s of building the grid
#: and starting the workers, after it 4 s of writing the files and 2 s of logging them). Without them the
#: first chunk's line said "ETA 23 min" and the last seconds said "ETA <1 s".
GRID_STEP_SHARES = {"build": 0.1, "write": 0.12, "log": 0.06}


def plan_grid_steps(prog: Progress, n: int) -> float:
    """Grow ``prog``'s plan by the steps that scale with the ``n`` candidates just built (scoring, writing,
    logging: :data:`GRID_STEP_SHARES`) and count the building as done. Returns the scoring's weight (units)."""
    units = n / SCORE_ROWS_PER_UNIT
    prog.add(units * (1.0 + sum(GRID_STEP_SHARES.values())))
    prog.advance(f"built {n} candidates", units * GRID_STEP_SHARES["build"])
    return units


def run_screen(cfg: Any) -> dict[str, Any]:
    """Screen the grid and log the run. Returns counts, stage figures, timings and file paths."""
    from carb.commands.checks import check_config

    check_config("screen", cfg)
    uri = cfg.tracking.uri
    art = cfg.tracking.get("artifact_root")
    tracking.configure(uri, art)
    target_uri = cfg.screen.target or default_target(uri, art)
    prog = Progress.from_cfg("carb-screen", 4.0, cfg, throttle=False)
    prog.begin(f"loading {target_uri}" + (f" and {cfg.screen.source}" if cfg.screen.get("source") else ""))
    t0 = time.perf_counter()
    target, source, notes = _load_models(cfg, target_uri)
    budget_cfg = _budget(cfg, screening.model_targets(target), notes)
    load_s = time.perf_counter() - t0
    check_model_takes_grid(cfg, target_uri, target)   # a ResNet-knob model and named networks: one line, no tracing
    t = time.perf_counter()
    prog.begin("building the grid")
    features = load_candidates(cfg)   # featurized by screen(), beside its scoring
    refused = dict(features.attrs.get("refused") or {})   # zoo networks left out: {label: reason}
    feat_s = time.perf_counter() - t
    units = plan_grid_steps(prog, len(features))
    chunk = int(cfg.screen.get("chunk_rows") or 100_000)
    big = len(features) > int(cfg.screen.get("progress_min_rows", 100_000))   # progress per chunk
    label = f"scoring {len(features)} candidates" + (" (two-stage)" if source is not None else "")
    if not big:
        prog.begin(label, len(features) / SCORE_ROWS_PER_UNIT)
    result = screening.screen(features, target, budget_cfg, cfg.screen.get("objective"), source,
                              int(cfg.screen.top_k), int(cfg.screen.shortlist_size),
                              outside=str(cfg.screen.get("outside", "flag")),
                              coverage=_coverage(cfg.screen.get("interval_coverage")),
                              profile_size=int(cfg.screen.get("profile_next", 10)),
                              pareto=list(cfg.screen.get("pareto") or []) or None,
                              require=to_dict(cfg.screen.get("require") or {}),
                              maximize=list(cfg.screen.get("maximize") or []), chunk_rows=chunk,
                              rescore=str(cfg.screen.get("rescore", "top_k")),
                              hj_weight=float((cfg.screen.get("hj") or {}).get("accuracy_weight", 0.5)),
                              workers=estimator_threads(len(features)),   # processes for the chunks
                              progress=(lambda what, share: prog.begin(f"{label}: {what}", share * len(features)
                                                                       / SCORE_ROWS_PER_UNIT)) if big else None)
    result.timings_s.update({"features_s": feat_s + result.timings_s.get("featurize_s", 0.0),   # build + featurize
                             "load_models_s": load_s})
    other = other_device(target)   # a CPU model screened on another CPU: one line, every candidate flagged
    for frame in (result.scored, result.shortlist):
        frame["other_device"] = other is not None
    if other:
        print(f"carb-screen: {other}", file=sys.stderr)
    mode = "two-stage" if source is not None else "single-stage"
    users = user_columns(features) + ([HJ_SCORE] if HJ_SCORE in result.scored else [])
    _print_report(cfg, result, notes, target_uri, target, source, mode, users, refused)
    out_dir = _write_files(cfg, result, prog, users, refused)
    validation = _validation(cfg, target, result.budget) if cfg.screen.get("validate") else {}
    for k, v in validation.items():
        if k.endswith(("accuracy", "rate", "mae")):
            print(f"{k} = {v:.4f}" if isinstance(v, float) else f"{k} = {v}")
    rec = screen_record(to_dict(cfg), result, target_uri, target.registry_.get("version", ""),
                        getattr(target, "device_name_", ""), mode, len(features), sweep_tags())
    tags = rec["tags"]
    if source is not None:
        tags.update({"source_model": cfg.screen.source, "source_version": source.registry_.get("version", "")})
    prog.begin("logging to MLflow", 1.0 + units * GRID_STEP_SHARES["log"])
    counts = result.counts
    with tracking.start_run("screen", sweep_suffix(rec["run_name"]), uri, tags=tags, artifact_root=art,
                            sweep=sweep_tags()) as run_id:
        tracking.log_config(rec["config"], rec["params"])
        tracking.log_dataset(grid_frame(features), name=tags["grid"], source=grid_source(rec["config"])[1],
                             context="candidates")
        metrics = {**counts, **{k: v for k, v in result.stages.items()}, **result.timings_s, **validation}
        tracking.log_metrics(metrics)
        tracking.log_artifact(out_dir, "screen")
    prog.finish(f"screened {counts['n_candidates']} candidates")
    csv = "scored.csv, " if (out_dir / "scored.csv").exists() else ""
    left = ", refused.csv" if refused else ""
    print(wrap_line(f"wrote {out_dir}/: shortlist.csv, profile_next.csv, {csv}scored.parquet, pareto.png{left}"))
    print(f"MLflow run {run_id}")
    say_run_page(run_id, uri)
    from carb.commands.calibrate import source_kind

    print("\n".join(next_steps(target_uri, uri, tracking.experiment_url(tracking.EXPERIMENTS["screen"],
                                                                      tracking.ui_base(uri)), kind=source_kind(target),
                                targets=screening.model_targets(target),
                                zoo=model_input_kind(target) == "zoo")))
    return {**counts, **result.stages, "timings_s": result.timings_s, "output_dir": str(out_dir),
            "run_id": run_id, "target": target_uri, "mode": mode, "validation": validation,
            "shortlist": result.shortlist, "notes": notes}


def _load_models(cfg: Any, target_uri: str) -> tuple[Any, Any, list[str]]:
    """``(target model, source model or None, notes)``: the source is optional with
    ``screen.source_optional`` (a note says it is missing)."""
    target, scope_note = screening.scoped_model(_load(target_uri, "target"),
                                                str(cfg.screen.get("interval_scope", "later_session")))
    source = None
    notes: list[str] = [scope_note] if scope_note else []
    if cfg.screen.get("source"):
        try:
            source = _load(cfg.screen.source, "source")
        except ModelError as e:
            if not cfg.screen.get("source_optional", False):
                raise
            notes.append(f"source model {cfg.screen.source} is not available ({e}); running single-stage "
                         f"with the target model only")
    return target, source, notes


def _budget(cfg: Any, targets: list[str], notes: list[str]) -> dict[str, Any]:
    """``screen.budget`` without its null limits; with ``screen.skip_unpredicted_budget`` also without
    the limits on targets the model does not predict (each dropped one noted in ``notes``)."""
    budget_cfg = {k: v for k, v in to_dict(cfg.screen.budget).items() if v is not None}
    if cfg.screen.get("skip_unpredicted_budget", False):
        for k in [k for k in budget_cfg if k not in targets]:
            notes.append(f"budget on {k} dropped: the target model does not predict it (predicts {targets})")
            budget_cfg.pop(k)
    return budget_cfg


def _print_report(cfg: Any, result: Any, notes: list[str], target_uri: str, target: Any, source: Any,
                  mode: str, users: list[str], refused: dict[str, str] | None = None) -> None:
    """The terminal report: notes, models, grid and budget, the networks refused (``{label: reason}``),
    training domain, decisions, shortlist."""
    for n in notes + result.notes:
        print(wrap_line(f"note: {n}"))
    print(f"carb-screen: {mode}; target {target_uri} "
          f"(v{target.registry_.get('version', '?')}, {getattr(target, 'device_name_', '?')}, "
          f"device_id {getattr(target, 'device_id_', None) or 'unknown'})"
          + (f"; source {cfg.screen.source} (v{source.registry_.get('version', '?')})" if source else ""))
    _print_origin(target)
    counts = result.counts
    print(wrap_line(f"grid {counts['n_candidates']} candidates; budget {budget_text(result.budget)}; "
          f"objective {result.objective}"))
    if refused:
        print(refused_line(refused))
    if source is not None:
        n_re, n_grid = result.stages.get("stage2_rescored", 0), result.counts["n_candidates"]
        where = "the whole grid" if n_re >= n_grid else f"the {n_re} re-scored candidates (screen.rescore=all: whole grid)"
        print(f"stage 1 kept top {result.stages['stage1_kept']} by the source model; Spearman(source, target) "
              f"on {where} = {result.stages['spearman_source_target']:.3f}")
    print(f"training domain: {counts.get('n_in_domain', 0)} candidates inside, {counts.get('n_outside', 0)} "
          f"outside (screen.outside={cfg.screen.get('outside', 'flag')}; reasons in the 'outside' column)")
    if counts.get("n_outside", 0) and "outside" in result.scored:
        from carb.model.domain import reason_counts

        reasons = [f"{r} ({n})" for r, n in reason_counts(result.scored["outside"])]
        line = "  most frequent reasons: " + reasons[0]
        for r in reasons[1:]:   # as many as fit one line
            if len(line) + 2 + len(r) > TABLE_WIDTH:
                break
            line += ", " + r
        print(line)
        hint = domain_hint(getattr(target, "domain_", None), counts.get("n_in_domain", 0), counts["n_candidates"])
        if hint:
            print(wrap_line(hint, TABLE_WIDTH))
    band = _coverage_words(result) if getattr(target, "intervals_", None) else "prediction +- one test MAE"
    print(f"accept {counts['n_accept']}, borderline {counts['n_borderline']}, unverified {counts['n_unverified']}, "
          f"reject {counts['n_reject']}; Pareto front {counts['n_pareto']} ({' x '.join(result.axes)})")
    print(f"  ({band}: accept = all within, reject = one over, borderline = crosses; "
          f"unverified = domain/unmeasured/inf)")
    _print_axes(result, users)
    _print_shortlist(result, screening.model_targets(target), users)
    _print_profile_next(result, shown_users(result, users))


def domain_hint(domain: dict[str, Any] | None, n_inside: int, n_candidates: int) -> str | None:
    """When fewer than half of ``n_candidates`` lie inside the model's training domain (``domain``:
    :func:`carb.model.domain.fit_domain`'s), one line with the training rows' batch sizes, input sizes (px),
    precisions and work (FLOPs per batch) and the keys that move the grid there; else None. (timm's GPU rows
    are fp16 at batches up to 1024: the default zoo grid, batch 1-2, lies wholly outside, and the reasons
    alone, ``flops < 2.7e+10``, do not say which knob to change.)"""
    if not domain or n_candidates <= 0 or n_inside * 2 >= n_candidates:
        return None
    ranges, cats = domain.get("ranges", {}), domain.get("categorical", {})
    parts = [f"{k} {ranges[k][0]:g}-{ranges[k][1]:g}" for k in ("batch_size", "input_size") if k in ranges]
    if cats.get("precision"):
        parts.append("precision " + "/".join(str(p) for p in cats["precision"]))
    if "flops" in ranges:
        parts.append(f"flops {ranges['flops'][0]:.1e}-{ranges['flops'][1]:.1e} per batch")
    if not parts:
        return None
    return ("  the model's training rows: " + ", ".join(parts) + "; move the grid there with space.batch_sizes, "
            "space.input_sizes, space.precisions (screen.grid_defaults for a grid file)")


def refused_line(refused: dict[str, str]) -> str:
    """The report's line (wrapped at the table width) naming the zoo networks left out of the grid
    (``{label: reason}``; the reasons are on stderr and in ``refused.csv``)."""
    return wrap_line(f"refused {len(refused)} network{'s' if len(refused) != 1 else ''}, not in the grid: "
                     f"{', '.join(sorted(refused))} (reasons above on stderr and in refused.csv)", TABLE_WIDTH)


def _print_origin(target: Any) -> None:
    """One line (wrapped at the table width) saying where a transferred target model's numbers come from
    (:func:`carb.model.transfer.describe_origin`: zero-shot from which source, by what, its band's devices)."""
    from carb.model.transfer import describe_origin

    origin = describe_origin(target)
    if origin:
        print(wrap_line(f"model: {origin}", TABLE_WIDTH))


def _print_axes(result: Any, users: list[str]) -> None:
    """The user's columns (passed through, how many lack a value), the requirements and their counts,
    and how the front was made (point values; ties within the intervals in ``pareto_ties``)."""
    scored = result.scored
    if users:
        parts = []
        for c in users:
            col = scored[c]
            text = col.dtype == object or isinstance(col.dtype, pd.StringDtype)
            missing = int((col.isna() | (col.astype(str) == "")).sum() if text
                          else pd.to_numeric(col, errors="coerce").isna().sum())
            parts.append(f"{c} ({missing} of {len(scored)} without a value)" if missing else c)
        print(wrap_line(f"passed through to every output: {', '.join(parts)}", TABLE_WIDTH))
    if result.require:
        limits = ", ".join(f"{k} {'>=' if mx else '<='} {v:g}" for k, (v, mx) in result.require.items())
        print(f"require {limits}: {result.stages.get('n_require_below', 0)} rejected, "
              f"{result.stages.get('n_require_missing', 0)} unverified for want of a value")
    off = int(scored.get("pareto_missing", pd.Series(dtype=bool)).sum())
    print(wrap_line(f"  (front on point predictions and values; ties = feasible candidates as good within the "
                    f"intervals{f'; {off} feasible without a value left off it' if off else ''})", TABLE_WIDTH))


def _print_shortlist(result: Any, targets: list[str], users: list[str]) -> None:
    """The shortlist, or the closest candidates when none meets the budget."""
    preds = [pred_name(t) for t in targets]
    shown = shown_users(result, users)
    if result.objective not in targets and result.objective != HJ_SCORE:   # per image: the column it ranks by
        preds.append(pred_name(result.objective))
    if result.scored.empty:   # screen.outside left none: the note above says why
        print("shortlist: empty (no candidate left to screen; see the note above)")
    elif result.shortlist.empty:
        closest = screening.closest_candidates(result.scored, result.budget)
        print("no candidate meets the budget; closest candidates (worst relative overshoot):")
        print(format_table(closest, preds, ["worst_overshoot"], users=shown))
    else:
        n_front = int(result.shortlist["pareto"].sum()) if "pareto" in result.shortlist else 0
        print(f"shortlist ({len(result.shortlist)}; front first ({n_front} rows), by {result.objective}; "
              f"P = P(within budget); "
              f"per batch, [lo, hi] = {_coverage_words(result)}):")
        print(format_table(result.shortlist, preds, ["pareto", "pareto_ties"], users=shown))


def shown_users(result: Any, users: list[str]) -> list[str]:
    """The user columns the terminal shows: all but :data:`FILES_ONLY`, unless an axis or requirement names them."""
    named = {a.lstrip("-") for a in result.axes} | set(result.require) | {result.objective}
    return [c for c in users if c not in FILES_ONLY or c in named]


def _coverage_words(result: Any) -> str:
    """``90 % interval`` (the coverage of the printed intervals), or ``no intervals``."""
    c = result.stages.get("interval_coverage")
    return f"{c:.0%} interval" if c else "interval"


def _print_profile_next(result: Any, users: list[str]) -> None:
    """The "profile next" list: the borderline candidates most worth measuring (``screen.profile_next``)."""
    nxt = result.profile
    if nxt.empty:
        return
    ratio = (f"own / best {HJ_SCORE}" if result.objective == HJ_SCORE else f"best {result.objective} / own")
    print(f"profile next ({len(nxt)} borderline; score = P x {ratio}; profile_next.csv):")
    print(format_table(nxt, [], ["profile_score", "decision_reason"], users=users))


def _write_files(cfg: Any, result: Any, prog: Progress, users: list[str],
                 refused: dict[str, str] | None = None) -> Path:
    """Write the scored grid (parquet, CSV), the shortlist and ``pareto.png`` into one folder per run
    (Hydra's run folder when run as a command, else a time-stamped one under ``screen.output_dir``); with
    ``refused`` (zoo networks left out, ``{label: reason}``) also ``refused.csv`` (columns ``model``, ``reason``)."""
    out_dir = hydra_run_dir() or Path(cfg.screen.output_dir) / time.strftime("%Y-%m-%d_%H-%M-%S")
    out_dir.mkdir(parents=True, exist_ok=True)
    prog.begin("writing the scored grid and pareto.png",
               1.0 + len(result.scored) / SCORE_ROWS_PER_UNIT * GRID_STEP_SHARES["write"])
    targets = [t for t in ("latency_ms", "energy_J", "peak_memory_MB") if pred_name(t) in result.scored]
    scored = file_frame(result.scored, targets, users)
    # each file atomically (carb.files.write_atomic): a full disk leaves the old file or none, never a part
    write_atomic(out_dir / "scored.parquet", lambda tmp: scored.to_parquet(tmp, index=False))
    csv_max = int(cfg.screen.get("scored_csv_max_rows", 100_000))
    if len(scored) <= csv_max:
        write_atomic(out_dir / "scored.csv", lambda tmp: scored.to_csv(tmp, index=False))
    else:
        print(f"note: scored.csv not written ({len(scored)} rows > screen.scored_csv_max_rows={csv_max}); "
              f"every candidate is in scored.parquet")
    for name, frame in (("shortlist.csv", result.shortlist), ("profile_next.csv", result.profile)):
        table = file_frame(frame, targets, users)
        write_atomic(out_dir / name, lambda tmp, table=table: table.to_csv(tmp, index=False))
    from carb.plots.screen import pareto_figure

    fig = pareto_figure(result)
    write_atomic(out_dir / "pareto.png", lambda tmp: fig.savefig(tmp, format="png", dpi=130, bbox_inches="tight"))
    if refused:
        table = pd.DataFrame({"model": list(refused), "reason": list(refused.values())})
        write_atomic(out_dir / "refused.csv", lambda tmp: table.to_csv(tmp, index=False))
    return out_dir


main = hydra_command("screen")(run_screen)

if __name__ == "__main__":
    main()
