"""Secrets never leave the process: a results URI and an Optuna storage URL that carry credentials
are used for a grid, a rerun, a study, status and a report; the secret appears in no line printed
and in no file written (under the results root, in the report folder).

The commands run in this process (`runner.cli.main`, as tests/test_object_store.py does), with output
captured at the file descriptors: what the CLI, logging, warnings and the C++ libraries beneath
(pyarrow's S3 client, psycopg) write to stdout or stderr is all seen, without seven interpreter
start-ups."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from runner.cli import main
from runner.errors import redact
from tests.test_object_store import s3_root  # noqa: F401 - the fixture: moto's S3 server on loopback

SECRET = "SuperSecret123"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("s3://AKID:SuperSecret123@bucket/p", "s3://AKID:***@bucket/p"),
        ("postgresql://user:SuperSecret123@127.0.0.1:5432/db", "postgresql://user:***@127.0.0.1:5432/db"),
        ("postgresql://postgres@127.0.0.1/db", "postgresql://postgres@127.0.0.1/db"),  # a user name, no secret
        (
            "s3://b/p?endpoint_override=h&secret_key=SuperSecret123&x=1",
            "s3://b/p?endpoint_override=h&secret_key=***&x=1",
        ),
        ("mysql://h/db?password=SuperSecret123", "mysql://h/db?password=***"),
        ("plain text, results in /tmp/results", "plain text, results in /tmp/results"),
    ],
)
def test_redact(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_no_command_prints_or_writes_a_secret(
    tmp_path: Path,
    s3_root: str,  # noqa: F811 - the imported fixture, requested by name
    capfd: pytest.CaptureFixture[str],
) -> None:
    root = s3_root.replace("s3://", f"s3://AKIDEXAMPLE:{SECRET}@")
    pg = os.environ.get("CONVGRID_TEST_PG_URL")
    if pg is None:
        pytest.skip("CONVGRID_TEST_PG_URL is not set (.ci/run starts PostgreSQL); the storage URL half needs it")
    storage = pg.replace("postgresql://postgres@", f"postgresql://postgres:{SECRET}@")  # trust auth: any password
    grid = tmp_path / "g.yaml"
    grid.write_text(
        yaml.safe_dump({"name": "secret_grid", "blocks": [{"task": "least_squares", "product": {"lr": [0.01, 9.0]}}]})
    )
    study = tmp_path / "s.yaml"
    study.write_text(
        yaml.safe_dump(
            {
                "name": "secret_study_" + os.urandom(4).hex(),
                "task": "least_squares",
                "space": {"lr": {"type": "float", "low": 0.01, "high": 0.5}},
                "objective": {"metric": "err_final"},
                "n_trials": 3,
                "parallel": 1,
            }
        )
    )
    report = tmp_path / "report"
    outputs: list[str] = []

    def cli(*args: str, ok: bool = True) -> None:
        code = main(list(args))
        out, err = capfd.readouterr()
        outputs.extend([out, err])
        assert (code == 0) == ok, out + err

    cli("run", str(grid), "--results", root, "--executor", "local", "--no-progress")
    from runner.store import ResultStore

    first = ResultStore(root).read_runs("least_squares")["run_id"][0].as_py()
    cli("run", "--only", first[:10], "--results", root, "--executor", "local", "--no-progress")
    cli("tune", str(study), "--results", root, "--storage", storage, "--executor", "local", "--no-progress")
    cli("tune", str(study), "--results", root, "--storage", storage, "--dry-run")
    cli("status", root)
    cli("report", root, "--out", str(report))
    cli("run", str(tmp_path / "missing.yaml"), "--results", root, ok=False)  # an error message too

    for text in outputs:
        assert SECRET not in text, text
    store = ResultStore(root)
    from pyarrow import fs as pafs

    written = [i.path for i in store.fs.get_file_info(pafs.FileSelector(store.base, recursive=True)) if i.is_file]
    assert written, "the commands wrote nothing to the object store"
    for path in written:
        with store.fs.open_input_stream(path) as f:
            assert SECRET.encode() not in f.read(), path
    for path in report.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
