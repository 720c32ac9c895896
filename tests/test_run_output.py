"""Every run's own output (issue 46): what a run prints to stdout and stderr, its warnings and its logging
records are kept with its attempt (logs/, runner.store.logs), bounded to the tail, per thread, from
runs in process, in threads and on the second node of a Ray cluster, and a worker's death keeps what
its run had printed; `convgrid logs RUN_ID` shows them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from runner.execute.base import WorkItem
from runner.execute.run_output import LIMIT, OutputTail
from runner.execute.worker import run_item
from runner.store import ResultStore
from runner.store.logs import read_logs
from tests.conftest import REPO


def _grid(tmp_path: Path, blocks: list[dict[str, Any]], name: str = "talk") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "blocks": blocks}))
    return path


def _run_id(root: Path, **params: Any) -> str:
    runs = ResultStore(root).read_runs("faulty", columns=["x", "status"]).to_pylist()
    (row,) = [r for r in runs if all(r[k] == v for k, v in params.items())]
    return str(row["run_id"])


def _assert_all_three(text: str, talk: str) -> None:
    assert f"stdout 0: {talk}" in text and f"stderr: {talk}" in text
    assert f"UserWarning: warning: {talk}" in text
    assert f"WARNING tests.toy_learner: logging: {talk}" in text


def test_the_tail_is_kept_with_a_marker_when_a_run_writes_more_than_the_bound() -> None:
    tail = OutputTail(["r"], limit=100)
    written = "".join(f"line {i:04d}\n" for i in range(50))  # 500 characters in 50 writes
    for line in written.splitlines(keepends=True):
        tail.write(line)
    text = tail.text()
    marker, body = text.split("\n", 1)
    assert body == written[-100:] and tail.dropped == 400
    assert marker == "[convgrid: 400 earlier characters dropped; the last 100 follow]"
    one = OutputTail(["r"], limit=10)
    one.write("x" * 25 + "0123456789")  # a single write longer than the bound
    assert one.text().endswith("\n0123456789") and one.dropped == 25
    small = OutputTail(["r"], limit=100)
    small.write("short\n")
    assert small.text() == "short\n"  # no marker when nothing was dropped


def test_a_failing_run_keeps_its_output_warning_logging_and_error_and_convgrid_logs_prints_them(
    tmp_path: Path, cli: Any
) -> None:
    grid = _grid(
        tmp_path,
        [
            {"task": "faulty", "params": {"talk": "boom", "fail": True, "x": 9.0}},
            {"task": "faulty", "params": {"x": 2.0}},
            {"task": "faulty", "params": {"talk": "long", "talk_times": 9000, "x": 3.0}},
        ],
    )
    root = tmp_path / "results"
    result = cli("run", str(grid), "--results", str(root), "--executor", "local", "--no-progress")
    assert result.returncode == 1  # the failed run
    failed = _run_id(root, x=9.0)
    shown = cli("logs", failed[:8], str(root))
    assert shown.returncode == 0, shown.stderr
    _assert_all_three(shown.stdout, "boom")
    assert "--- its error ---\nRuntimeError: asked to fail with x=9.0" in shown.stdout
    assert "(faulty, failed," in shown.stdout
    quiet = cli("logs", _run_id(root, x=2.0), str(root))
    assert quiet.returncode == 0 and "wrote nothing" in quiet.stdout
    assert cli("logs", "zz", str(root)).returncode == 2

    # the bound: 9,000 lines of ~15 characters, the last 64 Ki characters kept after a marker
    (long,) = read_logs(ResultStore(root), [_run_id(root, x=3.0)])
    marker, body = long.log.split("\n", 1)
    assert marker.startswith("[convgrid: ") and "earlier characters dropped" in marker
    assert len(body) == LIMIT and "stdout 8999: long" in body and "stdout 0: long\n" not in body
    assert body.endswith("WARNING tests.toy_learner: logging: long\n")

    # a second attempt: `logs` shows the newest, `--all` both, oldest first
    assert cli("run", str(grid), "--results", str(root), "--executor", "local", "--retry-failed").returncode == 1
    both = cli("logs", failed[:8], str(root), "--all").stdout
    assert both.count("stdout 0: boom") == 2
    assert both.index("attempt 1 of 2") < both.index("attempt 2 of 2")
    assert "attempt 1 of 2" not in cli("logs", failed[:8], str(root)).stdout

    status = cli("status", str(root)).stdout
    assert f"faulty {failed[:12]}: RuntimeError: asked to fail with x=9.0  [convgrid logs {failed[:12]}]" in status
    assert cli("report", str(root), "--out", str(tmp_path / "report")).returncode == 0
    page = (tmp_path / "report" / "report.md").read_text()
    assert f"kept for 1 failed run (`{failed[:12]}`)" in page


def test_runs_in_threads_each_keep_their_own_output_not_an_interleaved_stream() -> None:
    """Two runs computing at once in two threads of one process (the in-process executor's pool), each
    printing while the other does: each record holds its own lines only."""
    started, results = threading.Barrier(2), {}

    def one(x: float) -> None:
        started.wait()
        item = WorkItem(f"run{x:g}", "faulty", {"x": x, "talk": f"thread {x:g}", "talk_times": 200, "sleep_s": 0.2})
        results[x] = run_item(item)

    threads = [threading.Thread(target=one, args=(x,)) for x in (1.0, 2.0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for x, other in ((1.0, 2.0), (2.0, 1.0)):
        log = results[x].log
        _assert_all_three(log, f"thread {x:g}")
        assert log.count(f": thread {x:g}\n") == 200 + 3  # 200 on stdout; stderr, the warning, the record
        assert f"thread {other:g}" not in log


def test_the_in_process_executors_threads_store_each_runs_own_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--executor local --workers 2` for a thread-safe learner (the toy one declared so here): two runs
    computing at the same time in the pool's threads, each printing 300 lines, each stored with its own."""
    from runner import run_grid
    from tests.options import opts
    from tests.toy_learner.task import FaultyTask

    monkeypatch.setattr(FaultyTask, "thread_safe", True, raising=False)
    cells = [
        {"task": "faulty", "params": {"x": x, "talk": f"pool {x:g}", "talk_times": 300, "sleep_s": 0.5}}
        for x in (1.0, 2.0)
    ]
    root = tmp_path / "results"
    run_grid({"name": "pool_talk", "blocks": cells}, root, opts(workers=2))
    runs = ResultStore(root).read_runs("faulty", columns=["x", "started", "finished"]).to_pylist()
    a, b = sorted(runs, key=lambda r: r["x"])
    assert a["started"] < b["finished"] and b["started"] < a["finished"]  # they did compute at once
    for row, other in ((a, b), (b, a)):
        (attempt,) = read_logs(ResultStore(root), [row["run_id"]])
        _assert_all_three(attempt.log, f"pool {row['x']:g}")
        assert attempt.log.count(f": pool {row['x']:g}\n") == 300 + 3
        assert f"pool {other['x']:g}" not in attempt.log


def test_outside_runs_warnings_and_logging_behave_as_before() -> None:
    """The hooks stay installed after a run: the driver's own warnings still show once per place, and its
    logging records still reach stderr through Python's last resort; none is kept by a run. A fresh
    interpreter: pytest records warnings itself."""
    script = textwrap.dedent(
        """
        import logging, warnings
        from runner.execute import run_output
        with run_output.capture(["r"]) as tail:
            print("in the run")
            warnings.warn("the run's", UserWarning)
        for _ in range(3):
            warnings.warn("driver's own", UserWarning)
        logging.getLogger("convgrid.test").warning("driver's record")
        print(tail.text().replace("\\n", "|"))
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("driver's own") == 1 and "driver's record" in proc.stderr
    assert proc.stderr.count("the run's") == 1  # teed where it went before, once
    kept = proc.stdout.splitlines()[-1]
    assert kept.startswith("in the run|") and "UserWarning: the run's" in kept and "driver" not in kept


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[Any]:
    """A head without CPUs and a second node with one: every actor runs on the second node."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    yield cluster
    import ray

    ray.shutdown()
    cluster.shutdown()


@pytest.mark.ray
@pytest.mark.faults
def test_a_run_on_the_second_node_prints_warns_fails_and_a_killed_workers_output_is_kept(
    tmp_path: Path, two_nodes: Any, cli: Any
) -> None:
    from runner import run_grid
    from tests.options import opts

    witness = tmp_path / "died"
    grid = {
        "name": "remote_talk",
        "blocks": [
            {"task": "faulty", "params": {"talk": "remote boom", "fail": True, "x": 7.0}},
            {"task": "faulty", "params": {"talk": "before dying", "die_after_talk": str(witness), "x": 8.0}},
            {"task": "faulty", "params": {"talk": "hung", "hang_s": 60.0, "x": 6.0}},
        ],
    }
    root = tmp_path / "results"
    options = opts("ray", address=two_nodes.address, workers=1, timeout_s=4.0, grace_s=0.5)
    report = run_grid(grid, root, options)
    assert report.counts == {"failed": 1, "ok": 1, "timeout": 1}
    assert witness.exists()  # the first attempt of x=8 did kill its worker

    failed = cli("logs", _run_id(root, x=7.0), str(root))
    assert failed.returncode == 0, failed.stderr
    _assert_all_three(failed.stdout, "remote boom")
    assert "RuntimeError: asked to fail with x=7.0" in failed.stdout

    (attempt,) = read_logs(ResultStore(root), [_run_id(root, x=8.0)])
    assert "[convgrid: this attempt]\n" in attempt.log, attempt.log
    lost, own = attempt.log.split("[convgrid: this attempt]\n")
    assert lost.startswith("[convgrid: an earlier attempt of this run, whose worker died before it finished")
    _assert_all_three(lost, "before dying")
    _assert_all_three(own, "before dying")  # the rerun talked too, and lived
    hung = cli("logs", _run_id(root, x=6.0), str(root)).stdout  # asked of the actor before the hard kill
    _assert_all_three(hung, "hung")
    assert "(faulty, timeout," in hung and "hard timeout: the run ignored its 4s deadline" in hung
    assert not list((root / "_store" / "incoming").rglob("*.log"))  # the live copies went with the session


@pytest.mark.ray
def test_the_slurm_jobs_wait_for_its_nodes_answers_once_they_joined_and_gives_up_after_its_timeout(
    two_nodes: Any,
) -> None:
    """`python -m cluster.slurm wait` (cluster/slurm.sbatch, a job of several nodes): exit 0 once the
    cluster has the nodes, 3 with a message when they do not come."""

    def wait(nodes: int, timeout_s: float) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "cluster.slurm", "wait", two_nodes.address, str(nodes), str(timeout_s)]
        return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)

    assert wait(2, 60).returncode == 0
    short = wait(3, 2)
    assert short.returncode == 3 and "fewer than 3 Ray nodes joined" in short.stderr
