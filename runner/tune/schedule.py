"""When trials are asked and told: the study as the executor's lazy source of cells.

The whole study is one `execute_cells` call. Its source (`cells`) asks a trial when there is room
and yields its cell; it yields None (nothing yet) while `parallel` trials are in flight, and the
executor asks again once it has handed a finished record to `finished`, which tells the trials.
Runs are persisted on the grid's flush policy (by count and by time), so a study writes a few
part files, not one per trial or batch.

* `async` (default): `parallel` trials are always in flight. A finished run's trials are told at
  once and the next trial is asked at the executor's next pull, so no worker waits for a batch's
  slowest run. Trials are told in completion order, which depends on timing: a seeded study is not
  reproducible, and a trial asked while others run is sampled without their results (TPE's constant
  liar counts them as bad).
* `deterministic`: `parallel` trials are asked together and told in trial-number order once all
  their runs have finished; then the next batch is asked. A seeded study is reproducible (pruning
  aside, docs/tuning.md), at the cost of workers idling while a batch's slowest run finishes.

Either way, a trial whose run is already in the store is told from the stored row without running,
and trials in flight that ask for the same cell share one run.

In async mode the storage's work runs beside the runs, as in the threads of `study.optimize(n_jobs=...)`:
tells on a teller thread, asks on up to `parallel` asker threads (in ask processes once they pay:
runner.tune.ask_processes), the executor pulling an answered ask at the doorbell's ring
(runner.execute.doorbell), and, where the runs are threads of this process, each run's thread telling
its trials and asking the next one (`ran`). A trial being asked counts as in flight. What each of these
buys, measured alone: docs/architecture.md, "Concurrency mechanisms, each measured alone". The state the
driver and the runs' threads both change is under one lock.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ALL_COMPLETED, FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, Protocol

from pydantic import ValidationError

from runner.execute.doorbell import Doorbell
from runner.grid.cells import Cell
from runner.settings import settings
from runner.store import RunRecord
from runner.tune.ask_processes import Asker
from runner.tune.optuna_adapter import Asked, State, Study, TrialInfo, grid_size
from runner.tune.pruning import PruningHub
from runner.tune.spec import StudyPlan
from runner.tune.trials import verdict
from tasks.status import is_settled


class ScheduleHost(Protocol):
    """What a schedule tells the driver that owns it (runner.tune.driver.StudyDriver)."""

    def rejected(self, count: int) -> None:
        """`count` trials asked with params the task rejects were told FAIL."""

    def decided(self, cell: Cell, row: dict[str, Any], fresh: bool) -> None:
        """A trial's run is settled (`fresh`: it ran now; else its stored row answered): in the
        driver's thread, before the tell is written."""

    def told(self, trial: TrialInfo, run_id: str) -> None:
        """A trial was told (on the teller thread in async mode)."""

    def ran(self, record: RunRecord) -> None:
        """A run finished (the executor's record, before its trials are told)."""


class TrialSchedule:
    def __init__(
        self,
        plan: StudyPlan,
        study: Study,
        known: dict[str, dict[str, Any]],
        hub: PruningHub,
        host: ScheduleHost,
        retry_failed: bool,
    ) -> None:
        self.plan, self.study, self.known, self.hub, self.host = plan, study, known, hub, host
        self.retry_failed = retry_failed
        self.deterministic = plan.mode == "deterministic"
        self.done = len(study.trials((State.COMPLETE, State.PRUNED)))
        self.failed = 0
        self.running = 0  # trials asked (or being asked) and not told yet
        self.stopped_early: str | None = None
        self.gave_up = False  # stopped at max_failed: the study did not get its trials
        self.waiting: dict[str, list[tuple[Asked, Cell]]] = {}  # run in flight -> the trials it will tell
        self.batch: list[tuple[Asked, Cell]] = []  # deterministic: this batch's trials, in number order
        self.rows: dict[str, dict[str, Any]] = {}  # deterministic: this batch's finished runs
        background = not self.deterministic and plan.parallel > 1 and plan.sampler.name != "grid"
        self._lock = threading.RLock()  # what `ran`, in a run's thread, and the driver's thread both change
        self._told_here: set[int] = set()  # trials told in their run's thread: the driver's bookkeeping is left
        self._asked_here: list[tuple[Asked, Cell]] = []  # trials asked in a run's thread, not yet pulled
        self._rejected_here = 0  # trials asked there whose params the task rejected (counted failed), not yet pulled
        self._asking_here = 0  # asks under way in runs' threads (each counted in `running`)
        self._teller = ThreadPoolExecutor(1, thread_name_prefix="convgrid-tell") if background else None
        self._tells: list[Future[None]] = []
        self._asker = ThreadPoolExecutor(plan.parallel, thread_name_prefix="convgrid-ask") if background else None
        self._asks: list[Future[tuple[Asked, Cell] | None]] = []  # asks under way, each counted in `running`
        # the executor's, while it listens: rung when an ask is answered; its `ran` is called in the runs' threads
        self.doorbell = Doorbell(self.ran if background and plan.batch == 1 else None)
        # in the driver, or in processes of their own once they pay (only beside the asker threads)
        self.asker = Asker(study, plan.parallel, settings().ask_processes if background else "off")

    def ask_one(self, rejected: Callable[[], None] | None = None) -> tuple[Asked, Cell] | None:
        """A new trial with its cell; None for one whose params the task rejects (told FAIL here). Safe
        in several threads at once (Optuna's study and storages are, as optimize's threads rely on).
        `rejected` is called as soon as the task rejects the params, before the trial is told FAIL."""
        trial = self.asker.ask()
        try:
            return trial, self.plan.cell(dict(trial.params))
        except (ValidationError, TypeError, ValueError) as exc:
            if rejected is not None:
                rejected()
            self.study.set_attr(trial, "note", f"params rejected by the task: {_reason(exc)}")
            self.study.tell(trial, state=State.FAIL)
            return None

    def ask(self, n: int) -> list[tuple[Asked, Cell]]:
        """n new trials with their cells, asked in this thread, and in turn."""
        return self._accepted([self.ask_one() for _ in range(n)])

    def _accepted(self, answers: list[tuple[Asked, Cell] | None]) -> list[tuple[Asked, Cell]]:
        """The asked trials the task accepts; the rejected ones count as failed (and were told so)."""
        asked = [a for a in answers if a is not None]
        rejected = len(answers) - len(asked)
        if rejected:
            with self._lock:
                self.failed += rejected
            self.host.rejected(rejected)
        return asked

    def _asked(self, room: int) -> list[tuple[Asked, Cell]] | None:
        """Trials for `room` free slots. In line, asked now; else `room` more asks start on the asker
        threads (each in flight from now on) and the answer is every ask that has finished. Where the
        executor hears the doorbell and runs are in flight, that may be none yet (None): the doorbell
        rings when one is, and the executor meanwhile takes in the runs that finish, as optimize's
        threads each ask while the others run. Else the driver waits here for the first ask (for all of
        them where trials run in batches: a batch is handed over whole)."""
        if self._asker is None:
            asked = self.ask(room)
            with self._lock:
                self.running += len(asked)
            return asked
        with self._lock:
            self.running += room
        for _ in range(room):
            ask = self._asker.submit(self.ask_one)
            ask.add_done_callback(lambda _: self.doorbell.ring())
            self._asks.append(ask)
        if not self._asks:
            return []
        # Asks answered in ask processes leave the driver free meanwhile; asked in this process they would
        # only compete with its other work for the GIL (measured: slower), so the driver waits for them.
        remote = self.asker.remote
        runs_in_flight = self.running > len(self._asks)
        if remote and self.plan.batch == 1 and runs_in_flight and self.doorbell.listening:
            done = [f for f in self._asks if f.done()]
            if not done:
                return None
            self._asks = [f for f in self._asks if f not in done]  # not `done()` again: one may finish meanwhile
        else:
            finished, pending = wait(self._asks, return_when=FIRST_COMPLETED if self.plan.batch == 1 else ALL_COMPLETED)
            done, self._asks = list(finished), list(pending)
        answers = [f.result() for f in done]
        with self._lock:
            self.running -= sum(a is None for a in answers)
        return self._accepted(answers)

    def _pull_asked_here(self) -> list[tuple[Asked, Cell]] | None:
        """The trials asked in runs' threads since the last pull (None if none asked and none rejected);
        the rejected ones, counted where they were asked, reach the driver's progress here."""
        with self._lock:
            if not self._asked_here and not self._rejected_here:
                return None
            asked, self._asked_here = self._asked_here, []
            rejected, self._rejected_here = self._rejected_here, 0
        if rejected:
            self.host.rejected(rejected)
        return asked

    def cells(self) -> Iterator[Cell | list[Cell] | None]:
        """The executor's source: cells of newly asked trials (in groups of `batch`, for a task that
        runs them as one batch), None while there is no room."""
        while True:
            asked = self._pull_asked_here()
            if asked is None:
                room = self._room()
                if room is None:
                    return
                if room == 0 and not self._asks:
                    yield None  # a run's thread asking, or the asks under way, ring the doorbell
                    continue
                asked = self._asked(room)
                if asked is None:
                    yield None  # the asks under way ring the doorbell when one is answered
                    continue
            group: list[Cell] = []
            for trial, cell in asked:
                if self.deterministic:
                    self.batch.append((trial, cell))
                with self._lock:
                    shared = cell.run_id in self.waiting
                    if shared:
                        self.waiting[cell.run_id].append((trial, cell))
                    elif cell.run_id not in self.known:
                        self.waiting[cell.run_id] = [(trial, cell)]
                        self.hub.add(cell.run_id, trial)
                if shared:
                    continue
                if cell.run_id in self.known:
                    if not self.deterministic:
                        self._tell(trial, cell, self.known[cell.run_id], fresh=False)
                else:
                    if self.plan.batch == 1:
                        yield cell
                        continue
                    group.append(cell)
                    if len(group) == self.plan.batch:
                        yield group
                        group = []
            if group:
                yield group
            self._settle_batch()  # a batch wholly answered from the store is told at once

    def left(self) -> int:
        """Trials still to run or finish (asked or not): what the executor's forecast counts."""
        return max(self.plan.n_trials - self.done - self.failed, 0)

    def finished(self, records: list[RunRecord]) -> None:
        """The executor's finished records (the `execute_cells` sink): tell their trials (those told in
        the run's own thread already, `ran`, only get the driver's bookkeeping)."""
        for record in records:
            self.hub.finish(record.run_id)  # no value of this run reaches its trial once it is told
            self.host.ran(record)
            self.asker.ran(float(record.row.get("wall_s") or 0.0), self.left() - self.running)
            with self._lock:
                if is_settled(record.row["status"], self.retry_failed):
                    self.known[record.run_id] = record.row
                trials = self.waiting.pop(record.run_id, [])
                told = {t.number for t, _ in trials if t.number in self._told_here}
                self._told_here -= told
            if self.deterministic:
                self.rows[record.run_id] = record.row
                continue
            for trial, cell in trials:
                if trial.number in told:
                    self.host.decided(cell, record.row, fresh=True)
                else:
                    self._tell(trial, cell, record.row, fresh=True)
        self._settle_batch()

    def ran(self, record: RunRecord) -> None:
        """In the thread whose run made `record`, before the driver takes it in (the doorbell's
        `on_record`): tell the run's trials, then ask the one trial that takes its slot, if there is
        room, for the driver's next pull. Not for a run no trial waits for (a baseline's)."""
        with self._lock:
            trials = self.waiting.get(record.run_id, [])
            if not trials:
                return
            tells = [(trial, cell.run_id, record.row["status"], *self._settle(record.row)) for trial, cell in trials]
            self._told_here.update(trial.number for trial, _ in trials)
            p = self.plan
            need = p.n_trials - self.done - self.running
            ask = self.failed < p.max_failed and min(p.parallel - self.running, need) > 0
            if ask:
                self.running += 1  # counted from now: the driver asks no trial for this slot meanwhile
                self._asking_here += 1
        self.hub.finish(record.run_id)
        for args in tells:
            self._write_tell(*args)
        if not ask:
            return
        answer, counted = None, False

        def count_rejected() -> None:
            # at once, not at the driver's next pull: another run's thread may decide meanwhile whether
            # max_failed leaves room for an ask (a trial asked on a count that lacked this one ran past it)
            nonlocal counted
            with self._lock:
                self.failed += 1
                self.running -= 1
                self._rejected_here += 1
                counted = True

        try:  # an error here reaches the driver as the run's thread's (runner.execute.threads)
            answer = self.ask_one(count_rejected)
        finally:
            # no ring: the record (or the error) queued next wakes the driver, which then pulls this trial
            with self._lock:
                self._asking_here -= 1
                if answer is not None:
                    self._asked_here.append(answer)
                elif not counted:  # the ask failed: its slot is free again
                    self.running -= 1

    def _settle_batch(self) -> None:
        """Deterministic mode: once every run of the batch is in, tell it in trial-number order."""
        if not self.deterministic or not self.batch or self.waiting:
            return
        for trial, cell in self.batch:
            fresh = cell.run_id in self.rows
            self._tell(trial, cell, self.rows[cell.run_id] if fresh else self.known[cell.run_id], fresh)
        self.batch.clear()
        self.rows.clear()

    def close(self) -> None:
        """Wait for the asks and tells still under way (and raise what failed in a tell). Idempotent. A study
        that ends normally has no ask under way (see `_room`); one stopped by an error or Ctrl-C may leave an
        asked trial RUNNING, which the driver's recovery (or the next start) tells FAIL and asks again."""
        if self._asker is not None:
            self._asker.shutdown(wait=True)
        self.asker.close()
        if self._teller is not None:
            self._teller.shutdown(wait=True)
        self._collect()

    def _collect(self) -> None:
        """Raise the error of a tell that failed on the teller thread; forget those done."""
        done = [f for f in self._tells if f.done()]
        self._tells = [f for f in self._tells if not f.done()]
        for f in done:
            f.result()

    def _settle(self, row: dict[str, Any]) -> tuple[State, list[float] | None, str | None]:
        """A trial's verdict from its run's row, counted (under the lock)."""
        state, values, note = verdict(self.plan, row)
        self.running -= 1
        self.done += state in (State.COMPLETE, State.PRUNED)
        self.failed += state == State.FAIL
        return state, values, note

    def _tell(self, trial: Asked, cell: Cell, row: dict[str, Any], fresh: bool) -> None:
        with self._lock:
            state, values, note = self._settle(row)
        self.host.decided(cell, row, fresh)
        args = (trial, cell.run_id, row["status"], state, values, note)
        if self._teller is None:
            self._write_tell(*args)
            return
        self._tells.append(self._teller.submit(self._write_tell, *args))
        self._collect()

    def _write_tell(
        self, trial: Asked, run_id: str, status: str, state: State, values: list[float] | None, note: str | None
    ) -> None:
        # No run_id attribute: it is the cell of the trial's params (trials/ has it), and every attribute
        # is one more write, fsynced in a journal, under the journal's lock that every ask and tell takes.
        if state != State.COMPLETE:  # COMPLETE means an ok run: no attribute (one journal write less)
            self.study.set_attr(trial, "run_status", status)
        if note:
            self.study.set_attr(trial, "note", note)
        told = self.study.tell(trial, values, state=state)
        if told is not None:  # else the grid sampler stopped the study: the driver's close writes its row
            self.host.told(told, run_id)

    def _room(self) -> int | None:
        """How many trials to ask now: 0 to wait for trials in flight, None to ask no more."""
        with self._lock:
            return self._room_locked()

    def _room_locked(self) -> int | None:
        p = self.plan
        if self.failed >= p.max_failed:
            if self.stopped_early is None:  # said once, when reached: trials in flight may still fail after it
                flying = f"; {self.running} trials in flight then ran to their end" if self.running else ""
                self.stopped_early = f"max_failed ({p.max_failed}) reached{flying}"
                self.gave_up = True
            # asks still under way were made before the limit was reached: their trials run, as those in flight
            # do, rather than stay RUNNING in the storage after the study has ended
            return 0 if self._asks or self._asking_here else None
        need = p.n_trials - self.done - self.running
        room = min(p.parallel - self.running, need)
        if self.deterministic and self.running:
            room = 0  # the batch is told before the next one is asked
        if room < min(p.batch, need):
            room = 0  # refill a whole batch at a time: a batch of one would waste the batched path
        if room > 0 and p.sampler.name == "grid":
            # never ask past the unvisited points (the grid sampler would repeat some)
            trials = self.study.trials()
            enqueued = sum(t.state == State.WAITING for t in trials)
            if not enqueued and self.study.exhausted():
                if not self.running:
                    self.stopped_early = "the grid is covered"
                return 0 if self.running else None
            visited = len({json.dumps(t.params, sort_keys=True) for t in trials if t.state.finished})
            room = min(room, grid_size(p) - visited - self.running + enqueued)
            room = room if room > 0 or self.running else 1
        if room <= 0:
            return 0 if self.running else None
        return room


def _reason(exc: Exception) -> str:
    """Why the task rejected a trial's params, in one line: pydantic's first line only counts the errors
    ('1 validation error for tagged-union[...]'), its reasons come after it."""
    if isinstance(exc, ValidationError):
        return "; ".join(
            f"{'.'.join(map(str, e['loc'][1:] or e['loc']))}: {e['msg']}" if e["loc"] else e["msg"]
            for e in exc.errors()
        )
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
