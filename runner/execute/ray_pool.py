"""RayExecutor: long-lived actors (one per CPU slot) on an embedded or existing Ray cluster, fed
chunks of cells sized from measured run times, so tiny tasks do not pay one Ray call each, with a
bounded number of chunks in flight per actor. Cells are pulled from their source only as chunk slots
free up (`runner.execute.feed`). A chunk lost with its actor is queued again.

An actor that died is given no work until it answers again: Ray restarts it, but after a lost node
the cluster may have no CPU slot left for it, and a call sent to it would wait forever.

Told the results root (`stage_to`, by the caller that persists its records), actors on the nodes that
reach it write their runs' curves there themselves and send the driver a manifest
(runner.execute.staging); `stage=False` keeps every row travelling to the driver.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from runner.execute import staging as workers_stage
from runner.execute.base import BatchPolicy, FeedStalled, Judge, ReportChannel, ReportSpec, WorkItem, WorkSource
from runner.execute.checkpointing import on_preempt
from runner.execute.doorbell import Doorbell
from runner.execute.feed import Feed
from runner.execute.staging import StagingTarget, probe_nodes
from runner.execute.worker_merge import WorkerMerges
from runner.store.records import RunRecord

MERGE_CLOSE_S = 10.0  # how long `close` waits for a merge under way on a worker before cancelling it


@dataclass
class _Chunk:
    """A chunk in flight: the actor it went to, its items, and the runs whose records came back."""

    actor: int
    items: list[WorkItem]
    finished: set[str] = field(default_factory=set)


class ChunkSizer:
    """Chunk sizes from measured per-run seconds: aim at `target_s` of work per chunk, but never so big
    that the last chunks leave actors idle (at most the remaining work split over every chunk slot,
    so the tail is cut finer and all actors finish together). `remaining` is None while the source
    has more than is held (no tail yet)."""

    def __init__(self, target_s: float = 2.0, max_chunk: int = 1024) -> None:
        self.target_s = target_s
        self.max_chunk = max_chunk
        self.total_s = 0.0
        self.count = 0

    def observe(self, records: Sequence[RunRecord]) -> None:
        self.total_s += sum(float(r.row.get("wall_s") or 0.0) for r in records)
        self.count += len(records)

    def size(self, remaining: int | None, slots: int) -> int:
        if self.count == 0:
            return 1  # measure first
        per_run = max(self.total_s / self.count, 1e-6)
        fair = self.max_chunk if remaining is None else max(1, math.ceil(remaining / slots))
        return max(1, min(self.max_chunk, int(self.target_s / per_run), fair))


@dataclass
class RayExecutor:
    """An actor pool on an embedded or existing Ray cluster."""

    address: str | None = None
    workers: int | None = None
    threads: int = 1
    timeout_s: float | None = None
    target_chunk_s: float = 1.0
    in_flight_per_worker: int = 2
    probe_s: float = 2.0  # how long an idle actor may take to answer before it is presumed down (_check_idle_actors)
    grace_s: float = 5.0  # after the cooperative deadline, how long a run may ignore it before its actor is killed
    batch: bool = True  # run cells with equal batch keys as one batched call (False: every cell alone)
    max_batch: int = 64
    gpus_per_worker: float = 0.0  # > 0: GPU actors (num_gpus=this) for tasks that compute on ctx.device
    label: str | None = None  # what runs here (a grid's or a study's name): the actors' names in Ray's dashboard
    stage: bool = True  # workers that reach the results root write their curves there (stage_to)
    name: str = "ray"
    staging: StagingTarget | None = field(default=None, init=False)
    _probed_root: str | None = field(default=None, init=False, repr=False)  # the root `staging` was probed for
    merges: WorkerMerges = field(default_factory=WorkerMerges, init=False, repr=False)  # on workers' nodes
    actors: list[Any] = field(default_factory=list, init=False)
    kinds: list[str] = field(default_factory=list, init=False)  # "gpu" or "cpu", per actor
    down: dict[int, Any] = field(default_factory=dict, init=False)  # dead actor index -> its liveness probe
    chunks_submitted: int = field(default=0, init=False)
    chunks_resubmitted: int = field(default=0, init=False)
    hard_kills: int = field(default=0, init=False)
    # run id -> what an attempt lost with its actor had written (runner.execute.live_output)
    lost_output: dict[str, str] = field(default_factory=dict, init=False, repr=False)
    _unlisten: Callable[[], None] = field(default=lambda: None, init=False, repr=False)  # see start

    def start(self) -> None:
        if self.actors:
            return
        from cluster import connect
        from runner.execute.learner_env import runtime_env

        # joining a cluster: workers elsewhere learn of external learners only through the job's runtime_env
        ray = connect(self.address, runtime_env=runtime_env()) if self.address else connect(None)
        from runner.execute.actor import ChunkActor  # imports ray: only after connect set its environment

        # With a GPU share: one actor per share of the cluster's GPUs (Ray places them on GPU nodes only),
        # for the tasks that compute on ctx.device; CPU actors on the CPU slots left, for the others.
        # Without: one CPU actor per CPU slot.
        from runner.execute.provenance import shipped

        resources = ray.cluster_resources()
        f = self.gpus_per_worker
        n_gpu = int(resources.get("GPU", 0) // f) if f > 0 else 0
        gpu = ChunkActor.options(num_cpus=self.threads, num_gpus=f)
        code = shipped()
        self.actors = [gpu.remote(self.threads, "cuda", f, self._actor_label(i, "gpu"), code) for i in range(n_gpu)]
        free = int(resources.get("CPU", 1) // self.threads) - n_gpu
        n = self.workers if self.workers is not None else (free if n_gpu else max(1, free))
        cpu = ChunkActor.options(num_cpus=self.threads)
        self.actors += [cpu.remote(self.threads, "cpu", None, self._actor_label(i, "cpu"), code) for i in range(n)]
        self.kinds = ["gpu"] * n_gpu + ["cpu"] * (len(self.actors) - n_gpu)
        self.down = {}
        self._unlisten = on_preempt(self._preempt)  # the driver's SIGTERM reaches the runs in the actors

    def _preempt(self) -> None:
        """Tell every actor that its runs are preempted (they save their state and stop)."""
        import ray

        ray.get([a.preempt.remote() for a in self.actors], timeout=10)

    def stage_to(self, root: str) -> str | None:
        """Have the actors on nodes that reach `root` (found by a probe, runner.execute.staging) write
        their runs' curves there; returns the session's folder under the root (the caller deletes what
        is left in it once everything is committed), or None where no node reaches it or `stage` is off.
        Probed once per root and pool."""
        if not self.stage:
            return None
        self.start()
        if self._probed_root != root:
            from runner.store.incoming import session_folder

            folder = session_folder()
            alive = [a for i, a in enumerate(self.actors) if i not in self.down]
            nodes = probe_nodes(alive, root, folder)
            rows, wait_s = workers_stage.STAGE_ROWS, workers_stage.STAGE_WAIT_S  # read now: tests change them
            self.staging = StagingTarget(root, folder, nodes, rows, wait_s) if nodes else None
            self._probed_root = root
        return self.staging.folder if self.staging is not None else None

    def merge_on_worker(self, root: str, max_parts: int) -> bool:
        """Merge the root's fragmented folders on a node whose actors stage there
        (runner.execute.worker_merge); False where none does, or while the last merge still runs."""
        if not self.stage or self.staging is None or self.staging.root != root:
            return False
        return self.merges.ask(self.staging.nodes, root, max_parts)

    def _actor_label(self, index: int, kind: str) -> str:
        """How the dashboard and the log prefixes name an actor: 'convgrid fig2_depth #0 cpu'."""
        return " ".join(filter(None, ["convgrid", self.label, f"#{index}", kind]))

    def report_channel(self, judge: Judge, spec: ReportSpec) -> ReportChannel:
        self.start()  # the channel actor needs Ray connected
        from runner.execute.report_channel import RayChannel

        return RayChannel(judge, spec)

    def execute(
        self, items: WorkSource, channel: ReportChannel | None = None, doorbell: Doorbell | None = None
    ) -> Iterator[list[RunRecord]]:
        """See `Executor.execute`. The doorbell is not heard: `ray.wait` cannot be interrupted from a
        thread, so a source answers in this thread (and its asks overlap the runs on the actors)."""
        import ray
        from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError, WorkerCrashedError

        self.start()
        lost = (RayActorError, ActorDiedError, ActorUnavailableError, WorkerCrashedError)
        self._check_idle_actors(lost)
        feed = Feed(items)
        sizer = ChunkSizer(self.target_chunk_s)
        pending: dict[Any, _Chunk] = {}  # a chunk's streaming generator -> what it was given
        load = [0] * len(self.actors)
        killed: set[str] = set()  # run ids recorded as hard timeouts; dropped when their chunk is requeued
        last_check = time.monotonic()
        while True:
            self._fill(feed, pending, load, sizer, channel.reporters if channel is not None else None)
            if not pending and feed.done:
                break
            if not pending and not feed.held and feed.waiting:
                raise FeedStalled()
            probes = {ref: idx for idx, ref in self.down.items()}
            ready, _ = ray.wait([*pending, *probes], num_returns=1, timeout=self._poll_s())
            if not ready:
                yield []  # nothing finished for a while: the caller's chance to flush on time
            for gen in ready:
                if gen in probes:
                    self._probed(gen, probes[gen], lost)
                    continue
                if gen not in pending:
                    continue  # abandoned with its actor below
                chunk = pending[gen]
                stream = cast(Iterator[Any], gen)  # an ObjectRefGenerator: one ObjectRef per list of records
                try:
                    records: list[RunRecord] = ray.get(next(stream))
                except StopIteration:
                    pending.pop(gen)
                    load[chunk.actor] -= 1
                    continue
                except lost:
                    # The actor died with the chunk (a killed worker, a lost node, or our hard timeout).
                    # Ray restarts the actor; the runs it had not finished go back to the front of the
                    # queue (what it finished already reached the caller, so nothing runs twice). Its
                    # other chunks died with it, or were sent after its death and would wait for a
                    # restart that may never come (a lost node): they are queued again too.
                    idx = chunk.actor
                    mine = [pending.pop(gen)]
                    mine += [pending.pop(other) for other in [g for g, c in pending.items() if c.actor == idx]]
                    load[idx] = 0
                    for lost_chunk in reversed(mine):
                        again = [i for i in lost_chunk.items if i.run_id not in lost_chunk.finished | killed]
                        self._keep_lost_output([i.run_id for i in again])
                        feed.give_back(again)
                    self.chunks_resubmitted += len(mine)
                    self.down.setdefault(idx, self.actors[idx].pid.remote())
                    continue
                chunk.finished.update(r.run_id for r in records)
                sizer.observe(records)
                self._with_lost_output(records)
                yield records
            poll = self._poll_s()
            if self.timeout_s is not None and time.monotonic() - last_check >= poll:
                last_check = time.monotonic()
                yield from self._enforce_hard_timeout(pending, killed)

    def _keep_lost_output(self, run_ids: list[str]) -> None:
        """What the runs of a chunk lost with its actor had written (runner.execute.live_output), for the
        records of the attempts that run them again."""
        if self.staging is None or not run_ids:
            return
        from runner.execute.live_output import read_live
        from runner.execute.staging import open_target

        found = read_live(open_target(self.staging.root), self.staging.folder, run_ids)
        self.lost_output.update(found)

    def _with_lost_output(self, records: Sequence[RunRecord]) -> None:
        if not self.lost_output:
            return
        from runner.execute.live_output import with_earlier

        for record in records:
            if (earlier := self.lost_output.pop(record.run_id, None)) is not None:
                with_earlier(record, earlier, "whose worker died before it finished")

    def _check_idle_actors(self, lost: tuple[type[Exception], ...]) -> None:
        """Between two `execute` calls (a shared grid's claim waves, a tuner's studies) no call waits on
        the actors, so one that died with its node then went unnoticed, and a chunk sent to it would
        wait for a restart that, after a lost node, may never come. Each actor not already down is asked
        for its pid; one that does not answer within `probe_s` (restarting, or gone) gets no work until
        that probe answers."""
        import ray

        probes = {idx: actor.pid.remote() for idx, actor in enumerate(self.actors) if idx not in self.down}
        if not probes:
            return
        ready, _ = ray.wait(list(probes.values()), num_returns=len(probes), timeout=self.probe_s)
        answered = set(ready)
        for idx, ref in probes.items():
            if ref not in answered:
                self.down[idx] = ref
                continue
            try:
                ray.get(ref)
            except lost:
                self.down[idx] = self.actors[idx].pid.remote()

    def _probed(self, ref: Any, idx: int, lost: tuple[type[Exception], ...]) -> None:
        """A dead actor's probe came back: it is alive again (restarted), or died again (probe anew)."""
        import ray

        try:
            ray.get(ref)
        except lost:
            self.down[idx] = self.actors[idx].pid.remote()
            return
        del self.down[idx]

    def _fill(
        self,
        feed: Feed,
        pending: dict[Any, _Chunk],
        load: list[int],
        sizer: ChunkSizer,
        reporters: Any,
    ) -> None:
        """Give every free chunk slot a chunk, least loaded actor first (so a few items spread over the
        actors), pulling from the source at most one chunk per free slot (the bounded look-ahead; with
        batching, at least a batch per slot, so that a chunk can hold the batch at the front). Each
        actor takes the items of its kind (GPU or CPU task) only."""
        alive = [idx for idx in range(len(self.actors)) if idx not in self.down]
        free = sum(self.in_flight_per_worker - load[idx] for idx in alive)
        if free <= 0:
            return
        slots = len(alive) * self.in_flight_per_worker
        feed.pull(max(sizer.size(None, slots), self.max_batch if self.batch else 1) * free)
        n = sizer.size(feed.held if feed.dry else None, slots)
        policy = BatchPolicy(enabled=self.batch, max_size=self.max_batch)
        while feed.held:
            idle = [idx for idx in sorted(alive, key=load.__getitem__) if load[idx] < self.in_flight_per_worker]
            for idx in idle:
                size = max(n, self._batch_at_front(feed, slots))
                where = None if len(set(self.kinds)) == 1 else (lambda item, k=self.kinds[idx]: self._kind(item) == k)
                chunk = feed.take(size, where)
                if chunk:
                    break
            else:
                return  # no free actor, or none of the kind the held items need
            staging = self.staging if self.stage else None
            gen = self.actors[idx].run_chunk.remote(chunk, self.timeout_s, reporters, policy, staging)
            pending[gen] = _Chunk(idx, chunk)
            load[idx] += 1
            self.chunks_submitted += 1

    def _kind(self, item: WorkItem) -> str:
        """Which actors run `item`: GPU actors when there are some and its task computes on ctx.device."""
        if "gpu" not in self.kinds or "cpu" not in self.kinds:
            return self.kinds[0]  # one kind of actor: it runs everything (a CPU task on a GPU actor uses the CPU)
        from tasks.base import device_for
        from tasks.registry import get_task

        try:
            return "gpu" if device_for(get_task(item.task), "cuda") != "cpu" else "cpu"
        except Exception:  # noqa: BLE001 - a task that cannot load fails on whichever actor runs it, as a record
            return "cpu"

    def _batch_at_front(self, feed: Feed, slots: int) -> int:
        """How many held items at the front share one batch key (at most a batch, and, once the source
        has ended, at most a fair share of what is left, so that every actor still gets work): a chunk
        holds at least that many, so that its worker can run them as one batch."""
        if not self.batch:
            return 1
        from runner.execute.batching import batch_key

        front = iter(feed.peek())
        first = next(front, None)
        key = batch_key(first) if first is not None else None
        if key is None:
            return 1
        cap = min(self.max_batch, max(1, math.ceil(feed.held / slots))) if feed.dry else self.max_batch
        n = 1
        for item in front:
            if n >= cap or batch_key(item) != key:
                break
            n += 1
        return n

    def _poll_s(self) -> float:
        """How long to wait for a record before yielding control: short enough for the caller's flush
        window and for the hard timeout's checks, long enough not to spin."""
        return 0.25 if self.timeout_s is None else min(0.25, max(0.05, self.timeout_s / 4))

    def _enforce_hard_timeout(self, pending: dict[Any, _Chunk], killed: set[str]) -> Iterator[list[RunRecord]]:
        """Kill actors whose current run is past its deadline plus the grace period; record it as timeout."""
        import ray

        from runner.execute.worker import timeout_record

        assert self.timeout_s is not None
        limit = self.timeout_s + self.grace_s
        busy = sorted({c.actor for c in pending.values()})
        try:
            states = ray.get([self.actors[i].current.remote() for i in busy], timeout=10)
        except Exception:  # noqa: BLE001 - an actor that cannot even answer is handled when its chunk fails
            return
        items = {i.run_id: i for c in pending.values() for i in c.items}
        for idx, state in zip(busy, states, strict=True):
            if state is None or state[1] < limit or killed.issuperset(state[0]):
                continue
            run_ids, elapsed = state
            killed.update(run_ids)
            try:  # what the runs wrote until now, from the actor's control group (it answers while they hang)
                output: dict[str, str] = ray.get(self.actors[idx].output.remote(list(run_ids)), timeout=5)
            except Exception:  # noqa: BLE001 - a record without its output rather than none
                output = {}
            ray.kill(self.actors[idx], no_restart=False)
            self.hard_kills += 1
            records = [timeout_record(items[run_id], elapsed, self.timeout_s) for run_id in run_ids]
            for record in records:
                record.log = output.get(record.run_id, "")
            yield records

    def worker_pids(self) -> list[int]:
        import ray

        self.start()
        return ray.get([a.pid.remote() for a in self.actors])

    def close(self) -> None:
        import ray

        self.merges.wait(MERGE_CLOSE_S)  # a merge is safe to stop, but the command's own merge comes next
        self._unlisten()
        for actor in self.actors:
            ray.kill(actor)
        self.actors = []
        self.kinds = []
        self.down = {}
        self.staging, self._probed_root = None, None
