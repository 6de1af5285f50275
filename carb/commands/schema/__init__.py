"""Typed schemas of every config group (``conf/<group>/*.yaml``) and of each command's composed config
(``conf/<command>.yaml``): unknown keys, wrong types and out-of-range values are refused before any work
starts, as one line naming the dotted key and what is allowed (:func:`validate`).

Why pydantic models rather than Hydra structured configs: a structured config (a dataclass in the
ConfigStore) types a value but cannot say ``>= 1``, ``in (0, 1]``, "a non-empty list of these names" or
"null or an integer, also as the text ``CARB_N_JOBS`` gives"; its errors are multi-line OmegaConf
texts; and it would change what the commands read (typed DictConfigs). These models validate the
composed, resolved config as plain data (``OmegaConf.to_container(cfg, resolve=True)``) and leave the
config itself untouched. One model per group, composed into one per command (:data:`COMMANDS`); each
model is strict (no ``"3"`` for 3, no ``1`` for true) and forbids keys it does not know, except where a
key passes settings through to a library (the specialists' and the corrector model's parameters).
The keys of ``hydra.*`` are Hydra's own and not checked here. The physics prior's settings are written
once, in :class:`carb.model.prior_config.PriorSettings`; the other groups' values live in their YAML
files and only their types and ranges here.
"""
from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from carb.commands.schema.commands import COMMANDS
from carb.commands.schema.errors import describe, error_line
from carb.errors import ConfigError

__all__ = ["COMMANDS", "describe", "error_line", "validate"]


def validate(command: str, config: dict[str, Any]) -> None:
    """Check ``config`` (the resolved composed config as plain data, ``hydra`` left out) against
    ``command``'s schema; raises the first problem as a one-line :class:`ConfigError`. A command
    without a schema is not checked."""
    schema = COMMANDS.get(command)
    if schema is None:
        return
    try:
        schema.model_validate(config)
    except ValidationError as e:
        raise ConfigError(error_line(schema, config, e.errors()[0])) from None

