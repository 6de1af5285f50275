"""Shared plumbing for the command modules: Hydra entry points that turn a :class:`CarbError`
into one line on stderr and exit code 2 (no traceback), and small config helpers.

Only command modules (``carb.commands.collect``, ``carb.commands.train``, ...) and this module import Hydra.
"""
from __future__ import annotations

import contextlib
import errno
import functools
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from carb.commands.progress import heartbeats, trace_progress
from carb.compute import limited, configure_from
from carb.errors import CarbError
from carb.files import unwritable  # noqa: F401 - re-exported: the run-folder check below uses it
from carb.resources import CONF_DIR as _CONF_DIR

#: The config tree (:data:`carb.resources.CONF_DIR`: ``conf/``, shipped inside the package as ``carb/conf``).
CONF_DIR = str(_CONF_DIR)


def register_resolvers() -> None:
    """OmegaConf resolvers the configs use: ``${carb_home:}`` (:func:`carb.resources.carb_home`)."""
    from omegaconf import OmegaConf

    from carb.resources import carb_home

    if not OmegaConf.has_resolver("carb_home"):
        OmegaConf.register_new_resolver("carb_home", lambda: str(carb_home()))
    if not OmegaConf.has_resolver("carb_help"):   # --help: the command's own groups (help_template)
        OmegaConf.register_new_resolver("carb_help", lambda command: help_template(str(command)))


def command_groups(command: str) -> list[tuple[str, list[str]]]:
    """``[(group, options)]`` of the config groups ``carb-<command>`` takes: the groups of ``conf/`` that are
    top-level keys of its schema (:data:`carb.commands.schema.commands.COMMANDS`), and ``experiment`` with the
    experiments whose usage line names the command (``carb-<command> +experiment=``). Another group (``data``
    for ``carb-screen``) is refused as an unknown key, so ``--help`` leaves it out."""
    from carb.commands.schema.commands import COMMANDS

    conf = Path(CONF_DIR)
    keys = list(COMMANDS[command].model_fields) if command in COMMANDS else []
    out = [(k, sorted(f.stem for f in (conf / k).glob("*.yaml"))) for k in keys if (conf / k).is_dir()]
    experiments = sorted(f.stem for f in (conf / "experiment").glob("*.yaml")
                         if f"carb-{command} +experiment=" in f.read_text())
    return sorted([(k, v) for k, v in out if v] + ([("experiment", experiments)] if experiments else []))


def help_template(command: str) -> str:
    """Hydra's ``--help`` page for ``carb-<command>`` (``hydra.help.template``): its own config groups
    (:func:`command_groups`; Hydra's default lists every group of ``conf/``, most of which it refuses), then
    the composed config (``$CONFIG``, filled in by Hydra)."""
    groups = "\n".join(f"{g}: {', '.join(opts)}" for g, opts in command_groups(command))
    plus = "; experiment is added: +experiment=<option>" if any(g == "experiment" for g, _ in
                                                                 command_groups(command)) else ""
    return (f"carb-{command} is powered by Hydra.\n\n== Configuration groups ==\n"
            f"Compose your configuration from those groups (group=option{plus})\n\n{groups}\n\n"
            "== Config ==\nOverride anything in the config (foo.bar=value)\n\n$CONFIG\n"
            "Powered by Hydra (https://hydra.cc)\nUse --hydra-help to view Hydra specific help\n")


def help_override(command: str, argv: list[str]) -> list[str]:
    """``argv`` with ``hydra.help.template`` set to :func:`help_template` (through the ``carb_help``
    resolver) when it asks for ``--help``/``-h``; else unchanged."""
    if not any(a in ("--help", "-h") for a in argv) or any(a.startswith("hydra.help.template=") for a in argv):
        return argv
    return [*argv, f"hydra.help.template=${{carb_help:{command}}}"]


def register_schemas() -> None:
    """Config nodes written by the schema rather than in YAML: ``schema/prior`` (the physics prior's
    defaults, :class:`carb.model.prior_config.PriorSettings`), which ``conf/prior/auto.yaml`` extends."""
    from hydra.core.config_store import ConfigStore

    from carb.model.prior_config import default_prior

    ConfigStore.instance().store(group="schema", name="prior", node=default_prior())


def concise_warnings() -> None:
    """Show warnings as one line (``warning: <message>``) instead of file, line and source."""
    import warnings

    warnings.formatwarning = lambda message, category, *a, **k: f"warning: {message}\n"
    # torchvision's notice that GoogLeNet's / Inception v3's random initialisation will change: CARB builds
    # them with random weights on purpose (traced on the meta device or timed), so the notice is noise on
    # every zoo command
    warnings.filterwarnings("ignore", message="The default weight initialization of")


@contextlib.contextmanager
def warnings_once() -> Iterator[None]:
    """Show each warning text once while the block runs, as ``warning: <message>`` on stderr: a refit of
    the same cascade (leave-one-batch-tier-out, extrapolation splits) warns from another place in the
    code, which Python's own once-per-location rule would show again."""
    import warnings

    seen: set[tuple[type, str]] = set()

    def show(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ARG001
        key = (category, str(message))
        if key not in seen:
            seen.add(key)
            print(f"warning: {message}", file=sys.stderr, flush=True)

    with warnings.catch_warnings():  # the filters stay as they are; only the display changes
        warnings.showwarning = show
        yield


#: Environment that turns off MLflow's usage-data collection (and other tools' that honour DO_NOT_TRACK).
NO_TELEMETRY = {"MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "1"}


def telemetry_off() -> None:
    """Set :data:`NO_TELEMETRY` in this process's environment (inherited by what it starts), unless the
    user set those variables."""
    import os

    for k, v in NO_TELEMETRY.items():
        os.environ.setdefault(k, v)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that the same clean-up runs (rows kept, MLflow run ended KILLED)."""


def terminate_as_interrupt() -> None:
    """Make SIGTERM raise :class:`Terminated` in the main thread (a cluster's job kill, ``kill <pid>``)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return

    def handler(signum, frame):  # noqa: ARG001
        raise Terminated()

    try:
        signal.signal(signal.SIGTERM, handler)
    except (ValueError, OSError):
        pass


#: Where this run's finished work is and the command that resumes it (:func:`finished_work`).
_FINISHED: dict[str, str] = {}


def finished_work(where: Any, resume: str = "") -> None:
    """Say where the finished work of the running command is (``where``: a file or folder) and the command
    that resumes or logs it; an interrupt (Ctrl-C, SIGTERM) then names both instead of "finished work is
    kept"."""
    _FINISHED.update(where=str(where), resume=resume)


def kept_line() -> str:
    """``finished work is kept`` or, after :func:`finished_work`, ``finished work is in <where> (resume:
    <command>)``."""
    if not _FINISHED:
        return "finished work is kept"
    resume = _FINISHED.get("resume")
    return f"finished work is in {_FINISHED['where']}" + (f" (resume: {resume})" if resume else "")


@contextlib.contextmanager
def kept_if_logging_fails(what: str, tracking_uri: Any) -> Iterator[None]:
    """Turn any failure inside the block (logging to the store, after the work was written) into one
    :class:`~carb.errors.TrackingError` that says ``what`` is kept (e.g. ``the tables are saved in <dir>``)."""
    from carb.errors import TrackingError

    try:
        yield
    except Exception as e:  # noqa: BLE001 - a store fault must not hide where the finished work is
        first = str(e) if isinstance(e, CarbError) else f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
        raise TrackingError(f"tracking.uri={tracking_uri}: logging failed ({first}); {what}") from None


def interrupted(command: str, e: KeyboardInterrupt) -> None:
    """One line for Ctrl-C (exit 130) or SIGTERM (:class:`Terminated`, exit 143) naming the finished work."""
    how = "terminated (SIGTERM)" if isinstance(e, Terminated) else "interrupted"
    print(f"carb-{command}: {how}; {kept_line()}", file=sys.stderr)
    sys.exit(143 if isinstance(e, Terminated) else 130)


#: ``errno`` values of a disk that refuses a write (full, over quota, read-only, file too large): one line,
#: exit 2, naming the finished work, instead of a traceback from whichever library was writing.
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG})


def disk_error(e: OSError) -> str:
    """One line for a refused write: what the disk said, the file when known, where finished work is."""
    what = e.strerror or " ".join(str(e).split())
    where = f" writing {e.filename}" if e.filename else ""
    return f"the disk refused a write{where} ({what}); {kept_line()}; free space (or pick a writable place) and rerun"


def fail(command: str, err: BaseException) -> None:
    """Print ``carb-<command>: error: <one line>`` to stderr and exit 2."""
    msg = " ".join(str(err).split()) or type(err).__name__
    print(f"carb-{command}: error: {msg}", file=sys.stderr)
    sys.exit(2)


@contextlib.contextmanager
def one_line_errors(command: str) -> Iterator[None]:
    """Every command's ending on a failure: a :class:`CarbError` or a refused write (:data:`DISK_ERRNOS`) is one
    line and exit 2, Ctrl-C / SIGTERM one line and exit 130 / 143 (:func:`interrupted`); anything else is raised."""
    try:
        yield
    except CarbError as e:
        fail(command, e)
    except KeyboardInterrupt as e:
        interrupted(command, e)
    except OSError as e:
        if e.errno not in DISK_ERRNOS:
            raise
        fail(command, disk_error(e))
    except Exception as e:  # noqa: BLE001 - a 401 / 403 of a protected tracking server is one line; else raised
        line = _auth_line(e)
        if line is None:
            raise
        from carb.errors import TrackingError

        fail(command, TrackingError(line))


def _auth_line(exc: BaseException) -> str | None:
    """One line for a tracking server's 401 / 403 (:func:`carb.tracking.auth.auth_failure_line`), else None."""
    if type(exc).__name__ not in ("MlflowException", "RestException"):
        return None
    from carb import tracking

    return tracking.auth_failure_line(exc, tracking.configured_uri() or os.environ.get("MLFLOW_TRACKING_URI", "?"))


def hydra_command(command: str, config_name: str | None = None) -> Callable:
    """Decorator making ``run_fn(cfg)`` a Hydra console entry point named ``carb-<command>``.

    The wrapped ``run_fn`` stays a plain function that tests call with a composed config."""
    def deco(run_fn: Callable[[Any], Any]) -> Callable[[], Any]:
        import hydra

        @hydra.main(version_base="1.3", config_path=CONF_DIR, config_name=config_name or command)
        def _main(cfg) -> Any:
            concise_warnings()
            terminate_as_interrupt()
            uri = (cfg.get("tracking") or {}).get("uri") if hasattr(cfg, "get") else None
            if uri:
                print(f"carb-{command}: tracking store {uri}", flush=True)
            with one_line_errors(command):
                from carb.commands.checks import check_config

                check_config(command, cfg)   # each job of a multirun too: a bad value stops before any work
                check_stores(command, cfg)   # a damaged, unreachable or read-only store too
                _FINISHED.clear()            # each job of a multirun names its own finished work
                compute = cfg.get("compute")   # commands that fit or score models; measuring ones keep theirs
                configure_from(compute)        # threads that fit the free cores (carb/compute.py)
                with warnings_once(), heartbeats(), trace_progress(command, cfg), \
                        (limited() if compute else contextlib.nullcontext()):
                    return run_fn(cfg)

        @functools.wraps(run_fn)
        def entry() -> Any:
            register_resolvers()
            register_schemas()
            telemetry_off()
            sys.argv[1:] = quote_values(sys.argv[1:], command)   # data.device='Titan X (Pascal)' as typed
            sys.argv[1:] = help_override(command, sys.argv[1:])  # --help lists the groups it takes, no others
            precheck(command, config_name or command, sys.argv[1:])
            return _main()

        return entry
    return deco


def check_stores(command: str, cfg: Any) -> None:
    """Before any work: the tracking store (:func:`carb.tracking.check_store`) and an Optuna storage the
    config names (``tune.storage``, ``model.tuned_from.storage``) must be reachable, undamaged and, where
    the command writes, writable; else one-line :class:`~carb.errors.CarbError` (exit 2), in seconds."""
    from carb import tracking
    from carb.errors import ConfigError
    from carb.files import sqlite_problem

    uri = (cfg.get("tracking") or {}).get("uri")
    if uri:
        tracking.check_store(str(uri), command)
    tuned = ((cfg.get("model") or {}).get("tuned_from") or {}) if command in ("train", "tune") else {}
    for key, storage, writes in (("tune.storage", (cfg.get("tune") or {}).get("storage"), command == "tune"),
                                 ("model.tuned_from.storage", tuned.get("storage"), False)):
        if storage:   # a database password comes from the environment (PGPASSWORD), never the logged config
            tracking.refuse_password_in_uri(key, str(storage))
        if storage and str(storage).startswith("sqlite:///"):
            why = sqlite_problem(str(storage)[len("sqlite:///"):], writes=writes)
            if why:
                raise ConfigError(f"{key}={storage}: the Optuna storage cannot be used: {why}; nothing was "
                                  f"done (move a damaged file aside, or set {key}=<another sqlite:/// file>)")


#: Hydra's quoting, for the hint after an override that does not parse.
QUOTING_HINT = ("a value with parentheses or other special characters needs Hydra's quotes inside the shell's: "
                "data.device=\"'Titan X (Pascal)'\" (docs/COMMANDS.md, 'Values with spaces or parentheses')")


def _parsed(override: str) -> tuple[bool, Any]:
    """``(parses, value)`` of one override under Hydra's grammar."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        return True, OverridesParser.create().parse_override(override).value()
    except Exception:  # noqa: BLE001 - any parse or evaluation error: it does not parse
        return False, None


def quote_value(override: str) -> str | None:
    """``key='value'`` for an override ``key=value`` that Hydra cannot parse but would as a quoted string
    (a device name with parentheses, ``data.device=Titan X (Pascal)`` after the shell took its quotes);
    None when it parses already or quoting does not help. Never quotes what looks like Hydra syntax: a
    value starting with a quote, ``[`` or ``{``, a call ``name(...)`` (``range(1,3)``), or a sweep's commas."""
    import re

    key, eq, value = override.partition("=")
    if not eq or not value or key.startswith("-") or _parsed(override)[0]:
        return None
    v = value.strip()
    if v[:1] in ("'", '"', "[", "{") or "," in v or re.match(r"[A-Za-z_]\w*\(", v):
        return None
    body = value.replace("'", "\\'")
    tail = len(body) - len(body.rstrip("\\"))   # trailing backslashes would escape the closing quote
    candidate = f"{key}='{body + chr(92) * tail}'"
    ok, parsed = _parsed(candidate)
    return candidate if ok and parsed == value else None


def quote_values(argv: list[str], command: str = "") -> list[str]:
    """``argv`` with each override that only parses as a quoted string quoted (:func:`quote_value`), saying
    so on stderr in one line each; everything else unchanged."""
    out = []
    for a in argv:
        fixed = None if a.startswith("-") else quote_value(a)
        if fixed is not None:
            print(f"carb-{command}: read {a.partition('=')[0]} as the string {a.partition('=')[2]!r}",
                  file=sys.stderr)
        out.append(fixed or a)
    return out


def composition_error_line(err: BaseException, config_name: str | None = None,
                           overrides: list[str] | None = None) -> str:
    """One line for a Hydra composition error: an unknown group option with the allowed ones, an
    unknown key (with the keys its parent allows, when ``config_name`` and ``overrides`` are given), or
    an override that does not parse."""
    import re

    text = str(err)
    options = getattr(err, "options", None)
    m = re.search(r"Could not find '([^']+)/([^']+)'", text)
    if options is not None and m:
        return f"{m.group(1)}={m.group(2)}: no such option; allowed: {', '.join(options)}"
    m = re.search(r"Could not override '([^']+)'", text)
    if m and config_name is not None:
        found = allowed_keys(config_name, overrides or [], m.group(1))
        if found is not None:
            return f"{found[0]}: unknown key; allowed: {found[1]}"
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("See https")]
    line = " ".join(lines) or type(err).__name__
    parse_fault = ("OverrideParseException" in type(err).__name__ or "mismatched input" in text
                   or "no viable alternative" in text or "token recognition error" in text
                   or "LexerNoViableAlt" in text)
    return f"{line}; {QUOTING_HINT}" if parse_fault else line


def allowed_keys(config_name: str, overrides: list[str], key: str) -> tuple[str, list[str]] | None:
    """``(unknown, allowed)`` for an override of ``key`` (dotted) that Hydra could not apply: ``unknown`` is
    the first part of ``key`` its config (``config_name`` with the other overrides) lacks, as a dotted
    path, and ``allowed`` the keys beside it; None when that cannot be composed."""
    rest = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") != key]
    try:
        node = compose(config_name, rest)
        parts = key.split(".")
        for i, part in enumerate(parts):
            if not hasattr(node, "keys"):
                return None
            if part not in node:
                return ".".join(parts[:i + 1]), list(node.keys())
            node = node[part]
    except Exception:  # noqa: BLE001 - any failure here: keep Hydra's own words
        return None
    return None


def sweep_variants(overrides: list[str], limit: int = 50) -> list[list[str]]:
    """Override lists that together use every value of every sweep (``a=1,2``, ``range(...)``,
    ``choice(...)``) once: the first values of all sweeps, then each other value of one sweep with
    the others at their first (at most ``limit`` lists)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    values = [[f"{ov.get_key_element()}={v}" for v in ov.sweep_string_iterator()] if ov.is_sweep_override()
              else [raw] for raw, ov in zip(overrides, parsed)]
    base = [v[0] for v in values]
    out = [base]
    for i, vals in enumerate(values):
        for v in vals[1:]:
            out.append(base[:i] + [v] + base[i + 1:])
    return out[:limit]


def precheck(command: str, config_name: str, argv: list[str]) -> None:
    """Compose and check (:func:`carb.commands.checks.check_config`) the command line's config before
    Hydra runs it, so that a composition error (an unknown option of a group, an unknown key, an
    override without ``=``) or a value the schema refuses is one line and exit code 2 instead of Hydra's
    text and exit code 1; with ``-m``, each swept value. Skipped when Hydra flags other than ``-m`` are given."""
    flags = [a for a in argv if a.startswith("-")]
    if any(f not in ("-m", "--multirun") for f in flags):
        return
    overrides = [a for a in argv if not a.startswith("-")]
    from carb.commands.checks import check_config
    from carb.errors import ConfigError

    try:
        for variant in (sweep_variants(overrides) if flags else [overrides]):
            check_config(command, compose(config_name, variant))   # every swept value, before any job runs
        problem = output_dir_problem(config_name, overrides, multirun=bool(flags))
        if problem:
            fail(command, ValueError(problem))
    except ConfigError as e:
        fail(command, e)
    except Exception as e:  # noqa: BLE001 - only Hydra's and OmegaConf's own errors are turned into one line
        mod = type(e).__module__ or ""
        if not (mod.startswith("hydra") or mod.startswith("omegaconf")):
            raise
        fail(command, ValueError(composition_error_line(e, config_name, overrides)))
    finally:
        try:
            from hydra.core.global_hydra import GlobalHydra

            GlobalHydra.instance().clear()
        except ImportError:
            pass


def output_dir_problem(config_name: str, overrides: list[str], multirun: bool = False) -> str | None:
    """One line when the folder Hydra would write this run to (``hydra.run.dir``, or ``hydra.sweep.dir``
    with ``-m``) cannot be created, naming the setting and what to set; None when it can (or when the
    folder cannot be resolved before Hydra runs)."""
    key = "sweep" if multirun else "run"
    try:
        cfg = compose(config_name, [o for o in overrides if "," not in o or o.startswith("hydra.")],
                      return_hydra_config=True)
        folder = Path(str(cfg.hydra[key].dir))
    except Exception:  # noqa: BLE001 - e.g. a resolver only Hydra's own run provides: let Hydra decide
        return None
    why = unwritable(folder)
    if why is None:
        return None
    return (f"hydra.{key}.dir: cannot write the run folder {folder}: {why}; allowed: a writable folder "
            f"(set paths.output_dir=<folder> or hydra.{key}.dir=<folder>)")


def compose(config_name: str, overrides: list[str] | tuple[str, ...] = (),
            return_hydra_config: bool = False) -> Any:
    """Compose ``conf/<config_name>.yaml`` with overrides, as the command line would (for tests and
    notebooks). Returns an OmegaConf DictConfig; with ``return_hydra_config`` it keeps the ``hydra``
    node (job name, run and sweep folders) that a command line run would use."""
    from hydra import compose as _compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    register_resolvers()
    register_schemas()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return _compose(config_name=config_name, overrides=list(overrides),
                        return_hydra_config=return_hydra_config)


def hydra_run_dir() -> Path | None:
    """The folder Hydra made for this run (``<paths.output_dir>/<command>/<time>/``, or the job's folder
    of a multirun) while a command runs under Hydra; ``None`` when the config was composed (tests,
    notebooks, ``carb-quickstart``). A command that writes files of its own can put them here so one run
    leaves one folder."""
    try:
        from hydra.core.hydra_config import HydraConfig
    except ImportError:
        return None
    if not HydraConfig.initialized():
        return None
    out = HydraConfig.get().runtime.get("output_dir")
    return Path(out) if out else None


def sweep_tags() -> dict[str, str]:
    """Tags of a multirun job: ``sweep`` (the sweep folder's name, one per ``-m`` call),
    ``sweep_overrides`` (this job's overrides, e.g. ``features=no_util``) and ``sweep_job`` (its number);
    ``{}`` outside a multirun."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode
    except ImportError:
        return {}
    if not HydraConfig.initialized():
        return {}
    hc = HydraConfig.get()
    if hc.mode != RunMode.MULTIRUN:
        return {}
    swept = swept_keys(sys.argv[1:]) | set((hc.sweeper.get("params") or {}).keys())
    mine = [o for o in hc.overrides.task if o.split("=", 1)[0].lstrip("+~") in swept]
    return {"sweep": Path(str(hc.sweep.dir)).name, "sweep_overrides": " ".join(mine),
            "sweep_job": str(hc.job.get("num", ""))}


def swept_keys(argv: list[str]) -> set[str]:
    """Keys that a command line sweeps over (``key=a,b``, ``range``, ``choice``)."""
    try:
        from hydra.core.override_parser.overrides_parser import OverridesParser

        parsed = OverridesParser.create().parse_overrides([a for a in argv if not a.startswith("-")])
    except Exception:  # noqa: BLE001 - not parseable: nothing is swept
        return set()
    return {ov.get_key_element().lstrip("+~") for ov in parsed if ov.is_sweep_override()}


def sweep_suffix(name: str) -> str:
    """``name`` plus ``/<key>=<value>,...`` for a multirun job's overrides that ``name`` does not already
    show (what differs between a sweep's runs); ``name`` unchanged outside a multirun."""
    import shlex

    skip = ("tracking.", "hydra", "data.path", "paths.", "+experiment")
    parts = []
    text = sweep_tags().get("sweep_overrides", "")
    try:
        overrides = shlex.split(text)         # Hydra escapes spaces in values ("RTX\ 5090")
    except ValueError:
        overrides = text.split()
    for o in overrides:
        key, _, val = o.partition("=")
        if val and not key.lstrip("+~").startswith(skip) and val not in name.split("/"):
            parts.append(f"{key.split('.')[-1]}={val}")
    return f"{name}/{','.join(parts)}" if parts else name


#: The widest terminal line CARB prints (README: output fits 120 columns).
WIDTH = 120


def command_text(name: str) -> str:
    """How to type the console script ``name`` (``carb-screen``, ``mlflow``) the way this process can run
    it: the bare name when ``PATH`` finds this interpreter's copy (an activated venv, an installed
    package); else its path beside the interpreter, relative to the current folder when under it
    (``.venv/bin/carb-screen``, as the README runs them without activating the venv), else absolute.
    The interpreter's folder rather than ``sys.argv[0]``, so ``python -m carb <cmd>`` and a test runner
    get the same answer as the console script."""
    import shutil

    here = Path(sys.executable).parent / name
    if not here.exists():
        return name
    found = shutil.which(name)
    if found and Path(found).absolute() == here.absolute():
        return name
    try:
        return str(here.absolute().relative_to(Path.cwd().absolute()))
    except ValueError:
        return str(here)


def wrap_line(text: str, width: int = WIDTH) -> str:
    """A report line (``carb-<cmd>: ...``) in lines of at most ``width`` columns, broken between words, the
    continuation lines indented by two spaces; a word longer than a line (a path) stays whole."""
    import textwrap

    if len(text) <= width:
        return text
    return "\n".join(textwrap.wrap(text, width, subsequent_indent="  ", break_long_words=False,
                                    break_on_hyphens=False))


def run_page(run_id: str, tracking_uri: Any = None) -> str:
    """``  run <address>``: the UI page of a run the command just logged, in the "Model training" view
    (:func:`carb.tracking.run_url`), on a line of its own (an address is about 107 columns); "" without
    a run (a read-only store) or an address."""
    from carb.tracking import run_url

    url = run_url(run_id, None if tracking_uri is None else str(tracking_uri))
    return f"  run {url}" if url else ""


def say_run_page(run_id: str, tracking_uri: Any = None) -> None:
    """Print :func:`run_page` when there is one."""
    line = run_page(run_id, tracking_uri)
    if line:
        print(line)


def wrap_command(lead: str, command: str, note: str = "", width: int = WIDTH) -> list[str]:
    """``lead + command`` (+ ``note``, e.g. ``   (or make ui)``) in lines of at most ``width`` columns: the
    command broken between its words with a shell continuation (`` \\``), so the lines still copy-paste as
    one command; continuation lines indented under the command. A single word longer than a line stays
    whole."""
    pad = " " * (len(lead) + 2)
    lines, line = [], lead
    for word in command.split(" "):
        if line not in (lead, pad) and len(line) + 1 + len(word) + 2 > width:
            lines.append(line + " \\")
            line = pad
        line = line + ("" if line in (lead, pad) else " ") + word
    if note and len(line) + len(note) > width:
        lines.append(line)
        line = pad.rstrip() + note.rstrip() if not note.startswith(" ") else pad + note.strip()
    elif note:
        line += note
    return lines + [line]


def to_dict(cfg: Any) -> dict[str, Any]:
    """Resolve a DictConfig to a plain dict (leaves dicts untouched)."""
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(cfg):
            return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    except ImportError:
        pass
    return dict(cfg)
