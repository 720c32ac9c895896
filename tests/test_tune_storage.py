"""The journal file and a real PostgreSQL server (loopback) hold the same trials for the same study;
optuna-dashboard opens both.

PostgreSQL comes from CONVGRID_TEST_PG_URL (`eval "$(bash .ci/postgres.sh)"`, as .ci/run does), or
else this module starts a throwaway server from the installed binaries and stops it afterwards; the
tests are skipped only when no PostgreSQL binaries exist.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from io import BytesIO
from pathlib import Path
from typing import Any

import optuna
import pytest

from runner.store import ResultStore
from runner.store.trials import read_trials
from runner.tune.driver import tune
from runner.tune.optuna_adapter import open_storage
from tests.options import opts
from tests.test_tune import LS_PARAMS, ls_study

pytestmark = pytest.mark.services


def _pg_bin() -> Path | None:
    found = shutil.which("initdb")
    candidates = [found] if found else []
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
    return Path(candidates[0]).resolve().parent if candidates else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    pytest.importorskip("psycopg", reason="the PostgreSQL driver is missing: pip install 'psycopg[binary]'")
    url = os.environ.get("CONVGRID_TEST_PG_URL")
    if url:
        yield url
        return
    bindir = _pg_bin()
    if bindir is None:
        pytest.skip("no PostgreSQL binaries (initdb) on this machine: install postgresql or run .ci/postgres.sh")
    as_user: list[str] = []
    workdir = Path(tempfile.mkdtemp(prefix="convgrid-pg-"))
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        shutil.chown(workdir, "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    data, port, user = workdir / "data", _free_port(), "postgres"

    def pg(*args: str) -> None:
        subprocess.run([*as_user, *args], check=True, capture_output=True, timeout=120)

    pg(str(bindir / "initdb"), "-A", "trust", "-U", user, "-D", str(data))
    pg(
        str(bindir / "pg_ctl"),
        "-D",
        str(data),
        "-l",
        str(workdir / "server.log"),
        "-w",
        "-o",
        f"-h 127.0.0.1 -p {port} -k {workdir}",
        "start",
    )
    try:
        pg(str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", user, "convgrid_test")
        yield f"postgresql://{user}@127.0.0.1:{port}/convgrid_test"
    finally:
        pg(str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop")
        shutil.rmtree(workdir, ignore_errors=True)


def _trial_set(storage: Any, name: str) -> set[tuple[Any, ...]]:
    study = optuna.load_study(study_name=name, storage=storage)
    return {
        (
            t.number,
            t.state.name,
            json.dumps(t.params, sort_keys=True),
            tuple(t.values or ()),
            tuple(sorted(t.intermediate_values.items())),
        )
        for t in study.trials
    }


def test_journal_and_postgres_hold_the_same_trials(tmp_path: Path, pg_url: str) -> None:
    name = f"same_{uuid.uuid4().hex[:8]}"
    raw = ls_study(
        name,
        params={**LS_PARAMS, "n_iters": 200},
        n_trials=12,
        parallel=3,
        mode="deterministic",  # async tells land on their own thread: which trials a pruner sees is timing
        pruner={"name": "median", "metric": "err", "options": {"n_startup_trials": 3, "n_warmup_steps": 10}},
    )
    (journal,) = tune(raw, tmp_path / "a", opts())
    (rdb,) = tune(raw, tmp_path / "b", opts(), storage=pg_url)
    assert journal.states == rdb.states and journal.states["PRUNED"] >= 1  # pruning decisions are the same too
    from_journal = _trial_set(open_storage(None, ResultStore(tmp_path / "a")).optuna_storage, name)
    from_pg = _trial_set(pg_url, name)
    assert len(from_journal) == 12 and from_journal == from_pg
    # Both stores link the same trials to the same runs.
    cols = ["number", "state", "params_json", "values", "run_id", "run_status"]
    a = read_trials(ResultStore(tmp_path / "a"), name).select(cols).to_pylist()
    b = read_trials(ResultStore(tmp_path / "b"), name).select(cols).to_pylist()
    assert a == b
    assert set(read_trials(ResultStore(tmp_path / "b"), name)["storage"].to_pylist()) == {pg_url}


def _dashboard_get(storage: str, path: str) -> Any:
    from optuna_dashboard import wsgi

    app = wsgi(storage)
    environ = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": path,
        "QUERY_STRING": "",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "80",
        "wsgi.input": BytesIO(),
        "wsgi.url_scheme": "http",
    }
    status: list[str] = []
    body = b"".join(app(environ, lambda s, h, *a: status.append(s)))
    assert status[0].startswith("200"), status
    return json.loads(body)


def test_optuna_dashboard_opens_journal_and_postgres(tmp_path: Path, pg_url: str) -> None:
    pytest.importorskip("optuna_dashboard")
    name = f"dash_{uuid.uuid4().hex[:8]}"
    for storage in (None, pg_url):
        tune(ls_study(name, n_trials=3, parallel=3), tmp_path, opts(), storage=storage)
    for target in (str(tmp_path / "optuna.journal"), pg_url):
        studies = {s["study_name"]: s for s in _dashboard_get(target, "/api/studies")["study_summaries"]}
        study = _dashboard_get(target, f"/api/studies/{studies[name]['study_id']}")
        assert len(study["trials"]) == 3 and study["objective_names"] == ["log10 err_final"]
