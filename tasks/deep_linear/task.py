"""deep_linear: layer-wise training of deep linear networks (paper 002, Shin), the Task the runner sees.

`run` builds the data and the optimum, initialises the weights (tracker.prepare), drives one learner
generator (BCGD, GD or BCSGD; each yields the end-to-end matrix after every iteration), evaluates the
paper's error after every iteration (needed for iterations-to-1e-10 and divergence), and leaves the
curve, early stop and summary to a Tracker. `run_batch` runs many configs of one shape as one stacked
computation (tasks.deep_linear.batched), the members' books kept together (a BatchTracker).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Sequence
from typing import Any, ClassVar

from tasks.base import Checkpoint, FieldType, FromSpec, Result, RunContext
from tasks.common import generator
from tasks.deep_linear import batched
from tasks.deep_linear.bcgd import bcgd
from tasks.deep_linear.bcsgd import BCSGDStats, bcsgd
from tasks.deep_linear.flops import FlopCounter
from tasks.deep_linear.gd import gd
from tasks.deep_linear.params import SPEC, AnyParams, BCSGDParams, GDParams
from tasks.deep_linear.tracker import Tracker, prepare, restored_weights, weight_tensors


class DeepLinearTask(FromSpec, spec=SPEC):
    thread_safe: ClassVar[bool] = True  # own generators, no shared mutable state (tasks.base.is_thread_safe)
    devices: ClassVar[tuple[str, ...]] = ("cpu", "cuda")  # computes on ctx.device (tasks.base.device_for)
    summary_fields: ClassVar[dict[str, FieldType]] = {
        "err_0": "float",
        "err_final": "float",
        "err_min": "float",
        "err_sweep1": "float",
        "loss_final": "float",
        "loss_star": "float",
        "iters_to_tol": "int",
        "sweeps_to_tol": "float",
        "flops_to_tol": "float",
        "n_increase": "int",
        "frac_increase": "float",
        "max_rel_increase": "float",
        "lr_used": "float",
        "lr_median": "float",
        "lr_du_hu": "float",
        "cond_x": "float",
        "kappa_x": "float",
        "rank_x": "int",
        "cond_attempts": "int",
        "min_width": "int",
        "w_star_fro": "float",
        "init_dist_fro": "float",
        "l4_grad_rel": "float",
        "rate_sweep_thm33": "float",
        "rate_sweep_lemma31": "float",
        "thm33_radius": "float",
        "thm33_applies": "bool",
        "thm34_depth_rhs": "float",
        "thm32_max_ratio": "float",
        "thm32_violations": "int",
        "bcsgd_floor_low": "float",
        "bcsgd_floor_upp": "float",
        "bcsgd_m_upp": "float",
        "bcsgd_m_low": "float",
        "bcsgd_gamma_low": "float",
        "bcsgd_gamma_upp": "float",
        "err_tail": "float",
        "flops_learner": "float",
        "flops_metric": "float",
        "flops_setup": "float",
        "flops_per_iter": "float",
        "data_sha256": "str",
    }
    curve_fields: ClassVar[dict[str, FieldType]] = {
        "err": "float",  # (1/m)[||WX-Y||^p - ||W*X-Y||^p], un-halved (the paper's y-axis)
        "loss": "float",  # (1/m)||WX-Y||^p = err + loss_star
        "lr": "float",  # step of this iteration (NaN at step 0)
        "layer": "int",  # layer updated (1..L); -1: all layers (GD); 0: initial state
        "sweep": "float",  # iterations / L for BCGD/BCSGD, iterations for GD
        "flops": "float",  # cumulative learner flops (spec section 5 form, metric excluded)
    }
    examples: ClassVar[list[dict[str, Any]]] = [
        {"algo": "bcgd", "d_in": 16, "d_out": 4, "m": 60, "L": 5, "n_iters": 60, "seed": 1},
        {"algo": "gd", "d_in": 16, "d_out": 4, "m": 60, "L": 3, "lr": 0.05, "n_iters": 60, "log_every": 5},
        {"algo": "bcsgd", "d_in": 12, "d_out": 3, "m": 40, "L": 3, "eta_bar": 0.5, "n_iters": 60},
        {
            "algo": "bcgd",
            "data": "gauss_bigcond",
            "d_in": 12,
            "d_out": 4,
            "m": 50,
            "L": 4,
            "width": 16,
            "init": "balanced",
            "order": "asc",
            "loss": "l4",
            "n_iters": 40,
        },
    ]
    diverging_example: ClassVar[dict[str, Any] | None] = {
        "algo": "gd",
        "lr_rule": "du_hu",
        "d_in": 32,
        "d_out": 10,
        "m": 150,
        "L": 10,
        "n_iters": 200,
    }

    def growable_budget(self, p: AnyParams) -> str | None:
        """n_iters, save for BCSGD, whose tail average (`err_tail`) starts at a fraction of the budget."""
        return None if isinstance(p, BCSGDParams) else "n_iters"

    def run(self, p: AnyParams, ctx: RunContext) -> Result:
        if batched.batch_key(p) is not None:
            return batched.run_batch([p], [ctx], self.summary_fields)[0]  # same kernels as in a batch: see batched
        setup = prepare(p, self.summary_fields, ctx.device)
        counter = FlopCounter()
        stats = BCSGDStats()
        tracker = Tracker(p, setup, counter, ctx)
        resume = ctx.resume
        if resume is not None:  # the state after a sweep (checkpoints are taken between sweeps only)
            setup.ws[:] = [w.to(ctx.device) for w in restored_weights(resume)]
            tracker.restore(resume.state)
            stats = BCSGDStats(**resume.state.get("bcsgd", {}))
        gen = generator(p.seed, "deep_linear", "bcsgd_sample")
        if resume is not None and "bcsgd_gen" in resume.tensors:
            gen.set_state(resume.tensors["bcsgd_gen"])
        if isinstance(p, GDParams):
            updates = gd(setup.prob, setup.ws, setup.lr_const, p.grad_scale, counter, resumed=resume is not None)
        elif isinstance(p, BCSGDParams):
            updates = bcsgd(setup.prob, setup.ws, p, counter, stats, gen)
        else:
            updates = bcgd(setup.prob, setup.ws, p, counter)

        def build() -> Checkpoint:
            state = tracker.state()
            tensors = weight_tensors(setup.ws)
            if isinstance(p, BCSGDParams):
                state["bcsgd"] = dataclasses.asdict(stats)
                tensors["bcsgd_gen"] = gen.get_state()
            return Checkpoint(tracker.t, tensors, state)

        t = tracker.t
        going = t < p.n_iters if resume is not None else tracker.start()
        while going:
            t += 1
            u = next(updates)
            going = tracker.step(t, setup.obj.err(u.m), u.lr, u.layer, u.gamma2)
            saving = t % setup.per_sweep == 0 and (going or tracker.ended_by_budget())
            if saving and not ctx.checkpoint(t, build, last=not going) and going:
                tracker.status = ctx.stop_status()
                going = tracker.stop()
        return tracker.result(stats)

    # --- the batched path (tasks.base.BatchableTask): GD and L2 BCGD, see tasks.deep_linear.batched ---

    def batch_key(self, p: AnyParams) -> Hashable | None:
        return batched.batch_key(p)

    def batch_bytes(self, p: AnyParams) -> int:
        return batched.batch_bytes(p)

    def run_batch(self, ps: Sequence[AnyParams], ctxs: Sequence[RunContext]) -> list[Result]:
        return batched.run_batch(ps, ctxs, self.summary_fields)


# The registry finds a learner by its folder name and takes this attribute.
TASK = DeepLinearTask
