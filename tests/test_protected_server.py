"""A protected tracking server (issue 42 item 7), against a tiny local HTTP stand-in of MLflow's basic-auth
app (the real ``mlflow server --app-name basic-auth`` is the slow test's, tests/test_scale_out.py): no or
wrong credentials (401) and a missing permission (403) end in one line naming what is missing, exit 2,
before any work; a READ-only user screens with the run unlogged, said in one line; a password in a store
URL is refused (it would be logged)."""
from __future__ import annotations

import base64
import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from carb.errors import TrackingError

#: The stand-in's users: name -> (password, may write).
USERS = {"reader": ("r-secret", False), "editor": ("e-secret", True)}


class _Handler(BaseHTTPRequestHandler):
    """/health open; every /api/ request needs basic credentials of :data:`USERS` (else 401, as basic-auth
    answers); a write (POST) by a user who may only read is 403."""

    def log_message(self, *a):   # quiet
        pass

    def _send(self, code: int, body: str, kind: str = "text/plain") -> None:
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        if code == 401:
            self.send_header("WWW-Authenticate", 'Basic realm="mlflow"')
        self.end_headers()
        self.wfile.write(data)

    def _user(self):
        auth = self.headers.get("Authorization", "")
        if not auth.startswith("Basic "):
            return None
        name, _, password = base64.b64decode(auth[6:]).decode().partition(":")
        return name if USERS.get(name, ("",))[0] == password else None

    def _handle(self, write: bool) -> None:
        if self.path.startswith("/health"):
            return self._send(200, "OK")
        name = self._user()
        if name is None:
            return self._send(401, "You are not authenticated. Please see the documentation for details.")
        if write and not USERS[name][1]:
            return self._send(403, "Permission denied")
        if "experiments/get-by-name" in self.path:
            exp = {"experiment_id": "1", "name": "carb-x", "lifecycle_stage": "active", "artifact_location": "x",
                   "tags": [{"key": "mlflow.experimentKind", "value": "custom_model_development"}]}
            return self._send(200, json.dumps({"experiment": exp}), "application/json")
        return self._send(200, "{}", "application/json")

    def do_GET(self):
        self._handle(write=False)

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._handle(write=True)


@pytest.fixture(scope="module")
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture
def as_user(monkeypatch):
    from carb.tracking import auth

    monkeypatch.setattr(auth, "_READ_ONLY", {})

    def login(name: str | None, password: str | None = None) -> None:
        for var, value in (("MLFLOW_TRACKING_USERNAME", name), ("MLFLOW_TRACKING_PASSWORD", password)):
            if value is None:
                monkeypatch.delenv(var, raising=False)
            else:
                monkeypatch.setenv(var, value)
    return login


def _line(e: pytest.ExceptionInfo) -> str:
    text = str(e.value)
    assert "\n" not in text and "Traceback" not in text
    return text


def test_no_credentials_is_one_line_naming_the_environment_variables(server, as_user):
    from carb.tracking import check_store

    as_user(None)
    with pytest.raises(TrackingError) as e:
        check_store(server, "train")
    line = _line(e)
    assert "asks for credentials (HTTP 401)" in line
    assert "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD in the environment" in line


def test_wrong_credentials_name_the_user_not_the_password(server, as_user):
    from carb.tracking import check_store

    as_user("editor", "wrong-secret")
    with pytest.raises(TrackingError) as e:
        check_store(server, "screen")
    line = _line(e)
    assert "refuses the credentials of user 'editor' (HTTP 401)" in line and "wrong-secret" not in line


def test_a_read_only_user_cannot_train_and_is_told_the_permission(server, as_user):
    from carb.tracking import check_store

    as_user("reader", "r-secret")
    with pytest.raises(TrackingError) as e:
        check_store(server, "train")
    line = _line(e)
    assert "user 'reader' lacks EDIT on experiment carb-train" in line and "HTTP 403" in line
    assert "r-secret" not in line


def test_a_read_only_user_screens_unlogged_said_in_one_line(server, as_user, capsys):
    from carb import tracking

    as_user("reader", "r-secret")
    tracking.check_store(server, "screen")             # no error: screening only reads a model
    assert tracking.store_read_only(server)
    with tracking.start_run("screen", "screen/x", server) as run_id:
        tracking.log_metrics({"n": 1.0})                # not sent: the run is not logged
    assert run_id == ""
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert err == [f"carb-screen: user 'reader' may only read experiment carb-screen (HTTP 403) on {server}: "
                   f"this run is not logged; its files are written"]


def test_an_editor_passes_the_check(server, as_user):
    from carb import tracking

    as_user("editor", "e-secret")
    tracking.check_store(server, "train")
    assert not tracking.store_read_only(server)


def test_a_403_met_later_is_one_line_and_exit_2(capsys, monkeypatch):
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import PERMISSION_DENIED

    from carb.commands.cli import one_line_errors

    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "reader")
    with pytest.raises(SystemExit) as e:
        with one_line_errors("promote"):
            raise MlflowException("API request to endpoint /api/2.0/mlflow/registered-models/alias failed with "
                                  "error code 403 != 200. Response body: 'Permission denied'",
                                  error_code=PERMISSION_DENIED)
    assert e.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("carb-promote: error: ") and "lacks the permission for registered-models/alias" in line


def test_a_password_in_a_store_url_is_refused_without_echoing_it():
    from carb.tracking import refuse_password_in_uri

    with pytest.raises(TrackingError) as e:
        refuse_password_in_uri("tune.storage", "postgresql://carb:pg-secret@127.0.0.1:5432/optuna")
    line = _line(e)
    assert "pg-secret" not in line and "PGPASSWORD" in line and line.startswith("tune.storage: ")
    with pytest.raises(TrackingError, match="MLFLOW_TRACKING_PASSWORD"):
        refuse_password_in_uri("tracking.uri", "http://admin:pw@127.0.0.1:5000")
    refuse_password_in_uri("tune.storage", "postgresql://carb@127.0.0.1:5432/optuna")   # user only: fine


def test_carb_train_without_credentials_stops_before_any_work(server, tmp_path):
    """As a user runs it: exit 2, one line, no traceback, in seconds (before loading or fitting anything)."""
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("MLFLOW_TRACKING_")}
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "carb.train", f"tracking.uri={server}",
                        f"hydra.run.dir={tmp_path}/out"], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 2, r.stderr[-2000:]
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("carb-train: error:")]
    assert len(lines) == 1 and "Traceback" not in r.stderr and "HTTP 401" in lines[0]
    assert "fitting" not in r.stdout.lower() and time.perf_counter() - t < 120
