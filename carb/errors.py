"""The library's own exceptions.

Every error a user can cause (bad knob, bad dataset, unreachable model URI, unsupported device) is a
:class:`CarbError` with a one-line message naming the field and the allowed values. Command entry
points turn a ``CarbError`` into that one line on stderr and exit code 2, never a traceback.
"""
from __future__ import annotations


class CarbError(Exception):
    """Base class: a user-facing error whose ``str()`` is one self-explaining line."""


class ConfigError(CarbError, ValueError):
    """An invalid knob, space, budget or command option."""


class DatasetError(CarbError, ValueError):
    """A dataset file that is missing, unreadable, or violates the schema."""


class MeasurementError(CarbError, RuntimeError):
    """A device or meter that cannot measure what was asked (e.g. no NVML energy counter)."""


class ModelError(CarbError):
    """A model URI, registry entry, alias or feature set that cannot be resolved or used."""


class TrackingError(CarbError):
    """The tracking store (MLflow) failed; the message says what was kept locally and how to log it."""


class ZooError(CarbError, ValueError):
    """A zoo model that cannot be built or traced: an unknown or non-vision name, settings or an input
    size the model refuses, or a forward that cannot run on the meta device. The message is one line
    that starts with ``model '<name>'`` and gives the reason, so a grid can list refused models."""
