"""The entry point of config validation: :func:`check_config` checks a composed config against its
command's schema (:mod:`carb.commands.schema`) before any work starts, and a bad key or value is a
one-line :class:`~carb.errors.ConfigError` naming the dotted key and what is allowed (exit code 2
through :func:`carb.commands.cli.hydra_command`).

``run_train``, ``run_tune``, ``run_collect``, ``run_screen``, ``run_calibrate`` and ``carb-quickstart``
call it first; :func:`carb.commands.cli.hydra_command` calls it for every command (each job of a
multirun sweep included) before the command runs.
"""
from __future__ import annotations

from typing import Any

from carb.commands.schema import validate


def _plain(cfg: Any) -> Any | None:
    """``cfg`` as plain containers with interpolations resolved, or None when one does not resolve
    (the command reports that itself)."""
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(cfg):
            try:
                return OmegaConf.to_container(cfg, resolve=True)
            except Exception:  # noqa: BLE001 - an interpolation error is the command's to report
                return None
    except ImportError:
        pass
    return cfg


def check_config(command: str, cfg: Any) -> None:
    """Check ``cfg`` (a DictConfig or plain dict of ``conf/<command>.yaml``) against the command's
    schema; raises the first problem as a one-line :class:`ConfigError`. ``hydra.*`` is not checked.
    Every command begins here, so it also marks the command's start: its MLflow run starts then
    (:func:`carb.tracking.command_started`), not when logging begins."""
    from carb.tracking import command_started

    command_started()
    plain = _plain(cfg)
    if isinstance(plain, dict):
        validate(command, {k: v for k, v in plain.items() if k != "hydra"})
