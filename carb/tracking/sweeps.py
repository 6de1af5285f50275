"""Multirun sweeps in the tracking store: one parent run per sweep that groups its jobs' runs."""
from __future__ import annotations

from collections.abc import Mapping

from carb.tracking.store import git_commit, mlflow_module

#: Parent run id per (experiment, sweep id) made or found by this process.
_SWEEP_PARENTS: dict[tuple[str, str], str] = {}


def sweep_parent(exp_id: str, kind: str, sweep: Mapping[str, str], start_ms: int | None = None) -> str:
    """Id of the parent run of a multirun sweep in experiment ``exp_id``: found by its tags
    (``carb.sweep_parent``, ``sweep``) or created, named ``<kind>/sweep/<sweep id>`` and left
    FINISHED; the job's overrides are added to its description (``mlflow.note.content``) and as tag
    ``job.<n>``. Works across processes (launchers that run jobs in parallel find the same parent). A new
    parent starts at ``start_ms`` (the first job's command start; None: now)."""
    mlflow = mlflow_module()
    client = mlflow.MlflowClient()
    sid = str(sweep["sweep"])
    key = (exp_id, sid)
    pid = _SWEEP_PARENTS.get(key)
    if pid is None:
        pid = _first_sweep_parent(client, exp_id, sid)
        if pid is None:
            run = client.create_run(exp_id, run_name=f"{kind}/sweep/{sid}", start_time=start_ms,
                                    tags={"carb.kind": kind, "carb.sweep_parent": "true", "sweep": sid,
                                          "git_commit": git_commit()})
            pid = run.info.run_id
            client.set_terminated(pid, "FINISHED")
            # parallel jobs that searched at the same time made parents too: all keep the first one
            first = _first_sweep_parent(client, exp_id, sid) or pid
            if first != pid:
                client.delete_run(pid)
                pid = first
        _SWEEP_PARENTS[key] = pid
    job, overrides = str(sweep.get("sweep_job", "")), str(sweep.get("sweep_overrides", ""))
    run = client.get_run(pid)
    note = run.data.tags.get("mlflow.note.content") or f"Multirun sweep {sid} of carb-{kind}: one child run per job."
    line = f"\n- job {job}: {overrides or '(no overrides)'}"
    if line not in note:
        client.set_tag(pid, "mlflow.note.content", note + line)
    if job:
        client.set_tag(pid, f"job.{job}", overrides or "(no overrides)")
    return pid


def _first_sweep_parent(client, exp_id: str, sid: str) -> str | None:
    """Id of the oldest parent run of sweep ``sid`` in experiment ``exp_id`` (ties: the smallest id)."""
    found = client.search_runs([exp_id], filter_string=f"tags.`carb.sweep_parent` = 'true' and tags.sweep = '{sid}'",
                               max_results=50)
    return min(found, key=lambda r: (r.info.start_time, r.info.run_id)).info.run_id if found else None


def sweep_job_finished(pid: str) -> None:
    """A job of the sweep whose parent run is ``pid`` ended: the parent's end time moves to now (never
    back: parallel jobs end in any order), so the parent's duration is the sweep's."""
    import time

    client = mlflow_module().MlflowClient()
    now = int(time.time() * 1000)
    end = client.get_run(pid).info.end_time or 0
    if now > end:
        client.set_terminated(pid, "FINISHED", end_time=now)

