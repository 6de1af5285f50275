"""A protected tracking server (``mlflow server --app-name basic-auth``): credentials and permissions.

MLflow's client sends HTTP basic credentials from the environment (``MLFLOW_TRACKING_USERNAME`` /
``MLFLOW_TRACKING_PASSWORD``); CARB never reads a password from a config file and never logs one. A server
that wants credentials answers 401, one that refuses a user the permission a request needs answers 403.

:func:`carb.tracking.store.check_access` runs before any work (from :func:`~carb.tracking.store.check_store`): it reads the
command's experiment (401: credentials missing or wrong) and, for a command that writes, makes the one
harmless write a new run needs the same permission for (the experiment's kind tag, set to the value it has;
or the experiment created when it does not exist yet). A 403 there ends a writing command in one line
naming the permission (EDIT on the experiment); ``carb-screen``, whose run only records what it did,
screens anyway: the shortlist is written locally and the run is not logged, said in one line
(:func:`read_only_for_user`). :func:`auth_failure_line` turns a 401 / 403 met later into one line.
"""
from __future__ import annotations

import os
import re

#: The environment variables MLflow's client reads the basic-auth credentials from.
USER_ENV, PASSWORD_ENV = "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"
#: HTTP status -> MLflow's error code name for it (``mlflow.utils.rest_utils.get_error_code``).
AUTH_CODES = {401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED"}
#: Experiments a command writes a run into, beyond its own (``quickstart`` trains, promotes and screens).
COMMAND_EXPERIMENTS = {"quickstart": ("train", "promote", "screen")}

#: Servers (tracking URIs) on which this process's user may only read: a record-only command runs unlogged.
_READ_ONLY: dict[str, str] = {}


def auth_status(exc: BaseException) -> int | None:
    """401 or 403 when ``exc`` is the tracking server refusing a request for want of credentials or of a
    permission (an MLflow exception with that HTTP status or error code), else None."""
    code = str(getattr(exc, "error_code", "") or "")
    for status, name in AUTH_CODES.items():
        if code == name:
            return status
    m = re.search(r"error code (401|403)\b", str(exc))
    return int(m.group(1)) if m and type(exc).__name__ in ("MlflowException", "RestException") else None


def endpoint_of(exc: BaseException) -> str:
    """The REST endpoint an MLflow error names (``runs/create``), or ``""``."""
    m = re.search(r"/api/2\.0/mlflow/([\w/-]+)", str(exc))
    return m.group(1) if m else ""


def user() -> str | None:
    """The user MLflow sends credentials for (``MLFLOW_TRACKING_USERNAME``), or None."""
    return os.environ.get(USER_ENV) or None


def auth_failure_line(exc: BaseException, uri: str, what: str = "") -> str | None:
    """One line for a 401 / 403 from the tracking server at ``uri`` (None for any other error): what is
    missing, the credentials (through :data:`USER_ENV` / :data:`PASSWORD_ENV`, never in a config file) or
    the permission (``what``: e.g. ``EDIT on experiment carb-train``, else the refused endpoint)."""
    status = auth_status(exc)
    if status is None:
        return None
    who = user()
    if status == 401:
        if who is None or not os.environ.get(PASSWORD_ENV):
            missing = PASSWORD_ENV if who else f"{USER_ENV} and {PASSWORD_ENV}"
            return f"tracking.uri={uri}: the MLflow server asks for credentials (HTTP 401): set {missing} in the environment"
        return f"tracking.uri={uri}: the MLflow server refuses the credentials of user {who!r} (HTTP 401): check {PASSWORD_ENV}"
    need = what or (f"the permission for {endpoint_of(exc)}" if endpoint_of(exc) else "a permission")
    return (f"tracking.uri={uri}: user {who or '(none)'!r} lacks {need} (HTTP 403): ask the server's admin to grant it, "
            f"or use another store")


def read_only_for_user(uri: str) -> str | None:
    """Why this process may only read the server at ``uri`` (found by :func:`check_access`), or None."""
    return _READ_ONLY.get(uri)


def mark_read_only(uri: str, why: str) -> None:
    """Record that this process's user may only read the server at ``uri`` (``why``: one clause)."""
    _READ_ONLY[uri] = why
