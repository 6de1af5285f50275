"""Shared plumbing for the command modules: Hydra entry points that turn a :class:`CarbError`
into one line on stderr and exit code 2 (no traceback), and small config helpers.

Only command modules (``carb.commands.collect``, ``carb.commands.train``, ...) and this module import Hydra.
"""
from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from carb.errors import CarbError
from carb.resources import CONF_DIR as _CONF_DIR

#: The config tree (:data:`carb.resources.CONF_DIR`: ``conf/``, shipped inside the package as ``carb/conf``).
CONF_DIR = str(_CONF_DIR)


def concise_warnings() -> None:
    """Show warnings as one line (``warning: <message>``) instead of file, line and source."""
    import warnings

    warnings.formatwarning = lambda message, category, *a, **k: f"warning: {message}\n"


def fail(command: str, err: BaseException) -> None:
    """Print ``carb-<command>: error: <one line>`` to stderr and exit 2."""
    msg = " ".join(str(err).split()) or type(err).__name__
    print(f"carb-{command}: error: {msg}", file=sys.stderr)
    sys.exit(2)


def hydra_command(command: str, config_name: str | None = None) -> Callable:
    """Decorator making ``run_fn(cfg)`` a Hydra console entry point named ``carb-<command>``.

    The wrapped ``run_fn`` stays a plain function that tests call with a composed config."""
    def deco(run_fn: Callable[[Any], Any]) -> Callable[[], Any]:
        import hydra

        @hydra.main(version_base="1.3", config_path=CONF_DIR, config_name=config_name or command)
        def _main(cfg) -> Any:
            concise_warnings()
            try:
                return run_fn(cfg)
            except CarbError as e:
                fail(command, e)
            except KeyboardInterrupt:
                print(f"carb-{command}: interrupted; finished work is kept", file=sys.stderr)
                sys.exit(130)

        @functools.wraps(run_fn)
        def entry() -> Any:
            return _main()

        return entry
    return deco


def compose(config_name: str, overrides: list[str] | tuple[str, ...] = (),
            return_hydra_config: bool = False) -> Any:
    """Compose ``conf/<config_name>.yaml`` with overrides, as the command line would (for tests and
    notebooks). Returns an OmegaConf DictConfig; with ``return_hydra_config`` it keeps the ``hydra``
    node (job name, run and sweep folders) that a command line run would use."""
    from hydra import compose as _compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

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


def to_dict(cfg: Any) -> dict[str, Any]:
    """Resolve a DictConfig to a plain dict (leaves dicts untouched)."""
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(cfg):
            return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    except ImportError:
        pass
    return dict(cfg)
