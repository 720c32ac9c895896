"""The bookkeeping of a batch of deep_linear runs (tasks.deep_linear.batched) as array operations.

`Tracker.step` accounts for one iteration of one run in Python: a batch of 64 members and 200
iterations made 12,800 such calls between the batched computation's steps. `BatchTracker`
does the same accounting for every member at once, one numpy operation over the member axis per rule:
errors, steps, running minimum, increases, the tolerance crossing, divergence, early stop. The
per-iteration values stay in arrays (one row per iteration) until the end, when each member's curve is
cut out of them at its logged steps (step 0, every `log_every`, the tolerance crossing, its last step,
the divergence step). Each member keeps its own budget, tolerance and cadence (the batch key lets them
differ). `ctx.report` is called, in member order, at the logged steps of the members whose context can
answer False (a reporter or a deadline): for any other a report is a no-op, and skipping it is what
makes the batch cheap.

The results equal those of one `Tracker` per member exactly (same IEEE operations in the same order,
per element); `MemberTrackers` is that reference, behind the same interface, for the tests. BCSGD and
the Thm 3.2 check (ratio against gamma^2, tail averages) are Tracker-only: the batch key keeps them out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from tasks.base import Result, RunContext
from tasks.deep_linear.flops import FlopCounter
from tasks.deep_linear.params import AnyParams, BCGDParams, BCSGDParams
from tasks.deep_linear.tracker import (
    INCREASE_RTOL,
    NOISE_FLOOR,
    Final,
    Setup,
    Tracker,
    finite_lower_median,
    make_result,
    resumed_state,
)
from tasks.status import DIVERGED, OK, Status

NAN = math.nan
DIVERGED_ABOVE = 1e150  # the largest error tasks.base.is_diverged lets pass (a test holds the two together)


class Bookkeeping(Protocol):
    """What run_batch asks of a batch's bookkeeping. Arrays run over the members; `rows` names the member
    of each row of the stack the learner computed (GD drops the rows of members that stopped)."""

    def start(self) -> np.ndarray: ...

    def step(self, t: int, rows: np.ndarray, errs: np.ndarray, lrs: np.ndarray, layer: int) -> np.ndarray: ...

    def results(self) -> list[Result]: ...

    # checkpoints (tasks.base.Checkpointable): a member's books in the form a Tracker keeps them
    def member_state(self, i: int) -> dict[str, Any]: ...

    def restore(self, states: Sequence[dict[str, Any]]) -> np.ndarray: ...

    def ended_by_budget(self, i: int, t: int) -> bool: ...

    def preempt(self, i: int) -> np.ndarray: ...


def _may_stop(ctx: RunContext) -> bool:
    """Whether `ctx.report` can answer False (or do anything at all): a reporter, a deadline, or a
    context type with its own report."""
    return ctx.reporter is not None or ctx.deadline is not None or type(ctx).report is not RunContext.report


class BatchTracker:
    """Every member's Tracker at once: `start()`, then `step(...)` after each iteration, each answering
    which members go on; `results()` once none does."""

    def __init__(
        self, ps: Sequence[AnyParams], setups: Sequence[Setup], counter: FlopCounter, ctxs: Sequence[RunContext]
    ) -> None:
        for p in ps:
            if isinstance(p, BCSGDParams) or (isinstance(p, BCGDParams) and p.check_thm32):
                raise ValueError(f"BatchTracker does not keep BCSGD's tail or the Thm 3.2 check; got {p.algo}")
        self.ps, self.setups, self.counter, self.ctxs = ps, setups, counter, ctxs
        n = len(ps)
        self.err0 = np.array([s.err0 for s in setups], dtype=np.float64)
        self.noise = NOISE_FLOOR * np.abs(self.err0)  # at or below it, changes are rounding (see tracker)
        self.tol = np.array([p.tol for p in ps], dtype=np.float64)
        self.stop_at_tol = np.array([p.stop_at_tol for p in ps], dtype=bool)
        self.n_iters = np.array([p.n_iters for p in ps], dtype=np.int64)
        self.log_every = np.array([p.log_every for p in ps], dtype=np.int64)
        self.per_sweep = np.array([s.per_sweep for s in setups], dtype=np.int64)
        self.sweep1_at = set(self.per_sweep.tolist())  # the iterations that end a member's first sweep
        self.rise = 1 + INCREASE_RTOL  # as Tracker computes it: prev * (1 + INCREASE_RTOL)
        self.reporting = [i for i, ctx in enumerate(ctxs) if _may_stop(ctx)]
        self.going = np.ones(n, dtype=bool)
        self.prev = self.err0.copy()
        self.err_min = self.err0.copy()
        self.err_sweep1 = np.full(n, NAN)
        self.n_inc = np.zeros(n, dtype=np.int64)
        self.max_inc = np.zeros(n)
        self.iters_to_tol = np.full(n, -1, dtype=np.int64)  # -1 here only: the Result gets None (Tracker's)
        self.flops_to_tol = np.full(n, NAN)
        self.stopped_at = np.zeros(n, dtype=np.int64)  # each member's last iteration
        self.status: list[Status] = [OK] * n
        self.diverged_step: list[int | None] = [None] * n
        # one row per iteration (row 0: the start): each member's error and step, whether it logged that
        # step; the layer and the learner's flops so far, shared by all
        self.errs: list[np.ndarray] = [self.err0]
        self.lrs: list[np.ndarray] = [np.full(n, NAN)]
        self.logged: list[np.ndarray] = [np.ones(n, dtype=bool)]
        self.layers: list[int] = [0]
        self.flops: list[float] = [counter.total]
        self._cut: tuple[int, tuple[np.ndarray, ...]] | None = None  # the history stacked for checkpoints

    def start(self) -> np.ndarray:
        """Step 0 reported to the members that may stop; False where a member must not even start."""
        for i in self.reporting:
            self._report(i, 0, self.err0[i])
        return self.going

    def _report(self, i: int, t: int, err: float) -> None:
        ctx = self.ctxs[i]
        if not ctx.report(t, err=float(err)):
            self.status[i] = ctx.stop_status()
            self.going[i], self.stopped_at[i] = False, t

    def step(self, t: int, rows: np.ndarray, errs: np.ndarray, lrs: np.ndarray, layer: int) -> np.ndarray:
        """Account for iteration `t` of the members in `rows` (their errors after it, their steps, the
        layer updated); the members that go on."""
        n = len(self.ps)
        if len(rows) == n:  # rows are the members in order (run_batch's stack only ever drops rows)
            e, lr = errs, lrs
        else:
            e, lr = np.full(n, NAN), np.full(n, NAN)
            e[rows], lr[rows] = errs, lrs
        act = self.going
        ok = act & (np.abs(e) <= DIVERGED_ABOVE)  # False for NaN and inf too: tasks.base.is_diverged
        div = act ^ ok
        prev = self.prev
        inc = ok & (e > prev * self.rise) & ~(prev <= self.noise)
        if inc.any():
            with np.errstate(invalid="ignore", divide="ignore"):  # in rows that are not counted
                rel = np.where(prev != 0, (e - prev) / np.abs(prev), math.inf)
            self.n_inc += inc
            np.copyto(self.max_inc, rel, where=inc & (rel > self.max_inc))  # max(a, b) keeps a when tied
        np.copyto(self.err_min, e, where=ok & (e < self.err_min))  # min(a, b) keeps a when tied
        if t in self.sweep1_at:
            np.copyto(self.err_sweep1, e, where=ok & (self.per_sweep == t))
        crossed = ok & (e <= self.tol) & (self.iters_to_tol < 0)
        if crossed.any():
            self.iters_to_tol[crossed], self.flops_to_tol[crossed] = t, self.counter.total
        done = ok & ((self.n_iters == t) | (crossed & self.stop_at_tol))
        logs = ok & ((t % self.log_every == 0) | crossed | done)
        stop = div | done
        if stop.any():
            self.going = act & ~stop
            self.stopped_at[stop] = t
            for i in np.flatnonzero(div).tolist():
                self.status[i], self.diverged_step[i] = DIVERGED, t
        for i in self.reporting:
            if logs[i]:
                self._report(i, t, e[i])
        np.copyto(prev, e, where=ok)
        self.errs.append(e)
        self.lrs.append(lr)
        self.logged.append(logs | div)
        self.layers.append(layer)
        self.flops.append(self.counter.total)
        return self.going

    def _history(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """errors, steps and logged flags (members x iterations), layers and flops (per iteration)."""
        errs, lrs, logged = np.stack(self.errs, 1), np.stack(self.lrs, 1), np.stack(self.logged, 1)
        return errs, lrs, logged, np.array(self.layers), np.array(self.flops)

    def _curve(self, i: int, history: tuple[np.ndarray, ...], upto: int | None = None) -> dict[str, list[Any]]:
        """Member i's curve, cut out of `history` at its logged steps (up to iteration `upto`)."""
        errs, lrs, logged, layers, flops = history
        steps = np.flatnonzero(logged[i] if upto is None else logged[i, : upto + 1])
        err = errs[i, steps]
        s = self.setups[i]
        curve: dict[str, list[Any]] = {
            "step": steps.tolist(),
            "err": err.tolist(),
            "loss": (err + s.obj.loss_star).tolist(),
            "lr": lrs[i, steps].tolist(),
            "layer": layers[steps].tolist(),
            "sweep": (steps / s.per_sweep).tolist(),
            "flops": flops[steps].tolist(),
        }
        # Where a Tracker leaves a NaN it leaves the one `math.nan` object (its start's step, a metric never
        # set), so that `==` on lists and dicts, which tries identity first, holds between two such runs
        curve["lr"][0] = NAN
        return curve

    def results(self) -> list[Result]:
        """Each member's Result: its summary from the final state, its curve cut out at its logged steps."""
        history = self._history()
        errs, lrs, _, _, flops = history
        lr_median = finite_lower_median(lrs[:, 1:].T, self.stopped_at)
        out = []
        for i, (p, s) in enumerate(zip(self.ps, self.setups, strict=True)):
            t = int(self.stopped_at[i])
            curve = self._curve(i, history)
            if not math.isnan(self.err_sweep1[i]):  # recorded (a finite error): the member finished a sweep
                s.summary["err_sweep1"] = float(self.err_sweep1[i])
            final = Final(
                status=self.status[i],
                diverged_step=self.diverged_step[i],
                t=t,
                err=float(errs[i, t]),
                err_min=float(self.err_min[i]),
                iters_to_tol=int(self.iters_to_tol[i]) if self.iters_to_tol[i] >= 0 else None,
                flops_to_tol=float(self.flops_to_tol[i]) if self.iters_to_tol[i] >= 0 else NAN,
                n_inc=int(self.n_inc[i]),
                max_inc=float(self.max_inc[i]),
                ratio_max=NAN,
                violations=0,
                lr_median=float(lr_median[i]),
                err_tail=NAN,
                flops_learner=float(flops[t]),
                curve=curve,
            )
            out.append(make_result(p, s, final))
        return out

    def member_state(self, i: int) -> dict[str, Any]:
        """Member i's books after the last iteration accounted for, as `Tracker.state` gives them (the
        tail average, BCSGD's alone, left at its start: the batch key keeps BCSGD out)."""
        t = len(self.errs) - 1
        if self._cut is None or self._cut[0] != t:  # one stack per checkpoint of the batch, not per member
            self._cut = (t, self._history())
        history = self._cut[1]
        errs, lrs, logged, _, _ = history
        p = self.ps[i]
        budget_row = bool(self.ended_by_budget(i, t) and t % p.log_every != 0)
        return dict(
            curve=self._curve(i, history, t),
            lrs=lrs[i, 1 : t + 1].tolist(),
            t=t,
            err=float(errs[i, t]),
            err_min=float(self.err_min[i]),
            iters_to_tol=int(self.iters_to_tol[i]) if self.iters_to_tol[i] >= 0 else None,
            flops_to_tol=float(self.flops_to_tol[i]),
            n_inc=int(self.n_inc[i]),
            max_inc=float(self.max_inc[i]),
            ratio_max=NAN,
            violations=0,
            tail_sum=0.0,
            tail_n=0,
            err_sweep1=float(self.err_sweep1[i]),
            flops=self.counter.total,
            budget_row=budget_row,
        )

    def restore(self, states: Sequence[dict[str, Any]]) -> np.ndarray:
        """Take every member's books from `states` (all after the same iteration) instead of starting; the
        members that go on."""
        sts = [resumed_state(st, p.n_iters) for st, p in zip(states, self.ps, strict=True)]
        t0, n = int(sts[0]["t"]), len(sts)
        errs, lrs = np.full((t0 + 1, n), NAN), np.full((t0 + 1, n), NAN)
        logged = np.zeros((t0 + 1, n), dtype=bool)
        layers, flops = [0] * (t0 + 1), [0.0] * (t0 + 1)
        for i, st in enumerate(sts):
            curve, steps = st["curve"], st["curve"]["step"]
            errs[steps, i], logged[steps, i] = curve["err"], True
            errs[t0, i] = self.prev[i] = st["err"]
            self.err_min[i] = st["err_min"]
            lrs[1:, i] = st["lrs"]
            for step, layer, f in zip(steps, curve["layer"], curve["flops"], strict=True):
                layers[step], flops[step] = layer, f
            self.err_sweep1[i], self.n_inc[i], self.max_inc[i] = st["err_sweep1"], st["n_inc"], st["max_inc"]
            self.iters_to_tol[i] = -1 if st["iters_to_tol"] is None else st["iters_to_tol"]
            self.flops_to_tol[i] = st["flops_to_tol"]
        self.errs, self.lrs, self.logged = list(errs), list(lrs), list(logged)
        flops[t0] = self.counter.total = sts[0]["flops"]  # the learner's flops of a member that ends at once
        self.layers, self.flops = layers, flops
        self.going = self.n_iters > t0
        self.stopped_at[~self.going] = t0
        return self.going

    def ended_by_budget(self, i: int, t: int) -> bool:
        at_tol = self.iters_to_tol[i] == t and self.stop_at_tol[i]
        return bool(self.status[i] == OK and self.stopped_at[i] == t == self.n_iters[i] and not at_tol)

    def preempt(self, i: int) -> np.ndarray:
        """Member i stops here, preempted (its state saved); the members that go on."""
        self.status[i] = self.ctxs[i].stop_status()
        self.going[i], self.stopped_at[i] = False, len(self.errs) - 1
        return self.going


class MemberTrackers:
    """The reference BatchTracker is held to: one Tracker per member, stepped member by member."""

    def __init__(
        self, ps: Sequence[AnyParams], setups: Sequence[Setup], counter: FlopCounter, ctxs: Sequence[RunContext]
    ) -> None:
        self.trackers = [Tracker(p, s, counter, ctx) for p, s, ctx in zip(ps, setups, ctxs, strict=True)]
        self.going = np.zeros(len(ps), dtype=bool)

    def start(self) -> np.ndarray:
        self.going = np.array([tr.start() for tr in self.trackers], dtype=bool)
        return self.going

    def step(self, t: int, rows: np.ndarray, errs: np.ndarray, lrs: np.ndarray, layer: int) -> np.ndarray:
        for pos, i in enumerate(rows.tolist()):
            if self.going[i]:
                self.going[i] = self.trackers[i].step(t, float(errs[pos]), float(lrs[pos]), layer)
        return self.going

    def results(self) -> list[Result]:
        return [tr.result() for tr in self.trackers]

    def member_state(self, i: int) -> dict[str, Any]:
        return self.trackers[i].state()

    def restore(self, states: Sequence[dict[str, Any]]) -> np.ndarray:
        for tr, st in zip(self.trackers, states, strict=True):
            tr.restore(st)
        self.going = np.array([tr.t < tr.p.n_iters for tr in self.trackers], dtype=bool)
        return self.going

    def ended_by_budget(self, i: int, t: int) -> bool:
        return self.trackers[i].t == t and self.trackers[i].ended_by_budget()

    def preempt(self, i: int) -> np.ndarray:
        tr = self.trackers[i]
        tr.status = tr.ctx.stop_status()
        self.going[i] = tr.stop()
        return self.going
