"""Algorithm 1: train the K*L coefficients of LD-Minv on the deep-supervised loss Eq. 4, then evaluate.

The test loss is the paper's: (1/n) sum_i ||A_i X_{K,i} A_i - A_i||_F^2 on the last layer, over a
seeded test set; the same test set also gives the fixed D-Minv baseline and the loss at the init.
A non-finite or astronomically large training loss stops the run as `diverged` at that iteration.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from tasks.base import Checkpoint, RunContext, is_diverged
from tasks.common import generator, torch_dtype
from tasks.ldminv import lemma2_facts as L2F
from tasks.ldminv import theory as T
from tasks.ldminv.coefficients import identity_value, initial_coefficients, project_box
from tasks.ldminv.data import DataSpec, Source
from tasks.ldminv.engine import Batch, Engine, eq4, over_members
from tasks.ldminv.flops import minv_forward_flops
from tasks.ldminv.params import MinvParams
from tasks.ldminv.run_books import RunBooks
from tasks.resume_state import generator_states, load_generators, load_optimizer, optimizer_tensors
from tasks.status import PREEMPTED

EVAL_CHUNK = 500  # matrices per evaluation chunk (bounds the matrix path's memory)
CURVE_KEYS = ("step", "train_loss", "test_loss", "lr", "max_abs_c_dev", "grad_norm")


@dataclass
class MinvOutcome:
    status: str
    summary: dict[str, Any]
    curve: dict[str, list[Any]] = field(default_factory=dict)
    n_steps: int = 0
    diverged_step: int | None = None
    flops: float = 0.0


def data_spec(p: MinvParams) -> DataSpec:
    return DataSpec(p.data, p.rows, p.cols, p.rank, p.entry_scale, p.kappa)


def make_engine(p: MinvParams, device: str) -> Engine:
    return Engine(data_spec(p), p.path, p.model, p.L, p.c0_rule, p.c0_factor, p.k_warm, torch_dtype(p.dtype), device)


def start_coefficients(p: MinvParams) -> torch.Tensor:
    seed = p.seed if p.init_seed is None else p.init_seed
    return initial_coefficients(
        p.model,
        p.K,
        p.L,
        p.coeff_init,
        seed,
        scale=p.init_scale,
        alpha=p.init_alpha,
        delta=p.delta,
        given=p.coeffs,
    )


def _chunked_losses(engine: Engine, b: Batch, coeffs: torch.Tensor | None, depth: int) -> list[torch.Tensor]:
    """Per-layer losses over a large set, in chunks, without a graph."""
    parts: list[list[torch.Tensor]] = []
    with torch.no_grad():
        for lo in range(0, len(b), EVAL_CHUNK):
            idx = torch.arange(lo, min(lo + EVAL_CHUNK, len(b)), device=b.base.device)
            sub = b.take(idx)
            parts.append(engine.fixed_losses(sub, depth) if coeffs is None else engine.losses(sub, coeffs))
    return [torch.cat([p[k] for p in parts]) for k in range(depth)]


def _log10(v: float) -> float:
    return math.log10(v) if v > 0 else -300.0 if v == 0 else math.nan


class Trainer(RunBooks):
    p: MinvParams

    def __init__(self, p: MinvParams, ctx: RunContext) -> None:
        self.p, self.ctx = p, ctx
        self.engine = make_engine(p, ctx.device)
        data_seed = p.seed if p.data_seed is None else p.data_seed
        self.test = self.engine.draw(Source(self.engine.spec, data_seed, "test"), p.n_test)
        self.train_source = Source(self.engine.spec, data_seed, "train")
        self.pool = None if p.n_train is None else self.engine.draw(self.train_source, p.n_train)
        self.batch_gen = generator(p.seed if p.init_seed is None else p.init_seed, "ldminv", "batches")
        # float64 leaf on the device whatever the compute dtype (the engine casts): the optimiser's state
        self.coeffs = start_coefficients(p).to(ctx.device).requires_grad_(True)
        self.status, self.steps = "ok", 0
        self.hit_tol: int | None = None  # never reached train_tol: stored as null (issue 28)
        self.diverged_step: int | None = None
        self.grad_init_max, self.last_train = math.nan, math.nan
        self.stopped = False
        self.init_coeffs = self.coeffs.detach().clone()
        self.test0 = math.nan
        self.curve: dict[str, list[Any]] = {k: [] for k in CURVE_KEYS}

    def next_batch(self) -> Batch:
        if self.pool is None:
            return self.engine.draw(self.train_source, self.p.batch)
        idx = torch.randperm(len(self.pool), generator=self.batch_gen)[: self.p.batch]
        return self.pool.take(idx.to(self.pool.base.device))

    def test_loss(self, coeffs: torch.Tensor | None) -> float:
        return float(_chunked_losses(self.engine, self.test, coeffs, self.p.K)[-1].mean())

    def max_dev(self) -> float:
        return float((self.coeffs.detach() - identity_value(self.p.model)).abs().max())

    def start(self) -> None:
        """Step 0: the test loss at the init, the curve's first row and the first report."""
        p = self.p
        self.test0 = self.test_loss(self.init_coeffs)
        self.log_row(0, math.nan, self.test0, p.lr, math.nan)
        self.stopped = not self.ctx.report(0, test_loss=self.test0)

    def generators(self) -> dict[str, torch.Generator]:
        gens = {"batches": self.batch_gen}
        if self.pool is None:  # fresh matrices every iteration: the train stream goes on from where it was
            gens.update({f"train_{k}": g for k, g in self.train_source.generators().items()})
        return gens

    def checkpoint(self, it: int, opt: torch.optim.Optimizer) -> Checkpoint:
        """The state after iteration `it`: coefficients, optimiser state, generators, curve and running summary."""
        tensors = {"coeffs": self.coeffs.detach().to("cpu", copy=True), **generator_states(self.generators())}
        tensors.update(optimizer_tensors(opt, [self.coeffs], "opt."))
        state = {
            "curve": {k: list(v) for k, v in self.curve.items()},
            "hit_tol": self.hit_tol,
            "grad_init_max": self.grad_init_max,
            "last_train": self.last_train,
            "test0": self.test0,
        }
        return Checkpoint(it, tensors, state)

    def restore(self, ckpt: Checkpoint) -> None:
        """Start from `ckpt` instead of step 0 (the optimiser's state: `load_optimizer`). The rows of the
        curve are those this config logs: a shorter run's row at its own last iteration goes (budget growth)."""
        st = ckpt.state
        with torch.no_grad():
            self.coeffs.copy_(ckpt.tensors["coeffs"])
        load_generators(self.generators(), ckpt.tensors)
        self.train_source.advanced()
        keep = [j for j, it in enumerate(st["curve"]["step"]) if self.logs(it)]
        self.curve = {k: [st["curve"][k][j] for j in keep] for k in CURVE_KEYS}
        self.hit_tol, self.grad_init_max = st["hit_tol"], st["grad_init_max"]
        self.last_train, self.test0, self.steps = st["last_train"], st["test0"], ckpt.step

    def log_row(self, it: int, train: float, test: float, lr: float, gnorm: float) -> None:
        row = (it, train, test, lr, self.max_dev(), gnorm)
        for key, v in zip(CURVE_KEYS, row, strict=True):
            self.curve[key].append(v)

    def after_step(self, it: int, value: float, lr_now: float, gnorm: float) -> bool:
        """Bookkeeping after this member's optimiser step at iteration `it`; False when it stops here."""
        p = self.p
        self.steps, self.last_train = it, value
        if self.hit_tol is None and value <= p.train_tol:
            self.hit_tol = it
        if not all(math.isfinite(float(c)) for c in self.coeffs.detach().flatten()):
            self.status, self.diverged_step = "diverged", it
            return False
        if self.logs(it):
            tl = self.test_loss(self.coeffs.detach())
            self.log_row(it, value, tl, lr_now, gnorm)
            if not self.reported(it, value, tl):
                return False
        return it < p.iters

    def outcome(self) -> MinvOutcome:
        if self.stopped:
            self.status = self.ctx.stop_status()
        if self.status == PREEMPTED:  # saved: the runner stores nothing of this attempt
            return MinvOutcome(PREEMPTED, {})
        return self.finish(
            self.status,
            self.diverged_step,
            self.steps,
            self.curve,
            self.init_coeffs,
            self.test0,
            self.hit_tol,
            self.grad_init_max,
            self.last_train,
        )

    def finish(
        self,
        status: str,
        diverged_step: int | None,
        steps: int,
        curve: dict[str, list[Any]],
        init_coeffs: torch.Tensor,
        test0: float,
        hit_tol: int | None,
        grad_init_max: float,
        last_train: float,
    ) -> MinvOutcome:
        p = self.p
        final = self.coeffs.detach()
        test_layers = _chunked_losses(self.engine, self.test, final, p.K)
        test = float(test_layers[-1].mean())
        fixed = float(_chunked_losses(self.engine, self.test, None, p.K)[-1].mean())
        test_eq4 = float(eq4(test_layers))
        if self.pool is not None:
            train_eq4 = float(eq4(_chunked_losses(self.engine, self.pool, final, p.K)))
            n_eval = len(self.pool)
        else:
            train_eq4, n_eval = last_train, 0
        summary: dict[str, Any] = {
            "test_loss": test,
            "log10_test_loss": _log10(test),
            "neg_log10_test_loss": -_log10(test),
            "test_loss_dminv": fixed,
            "log10_test_loss_dminv": _log10(fixed),
            "test_loss_init": test0,
            "log10_gain_vs_dminv": _log10(fixed) - _log10(test),
            "test_loss_eq4": test_eq4,
            "train_loss_final": train_eq4,
            "log10_train_loss_final": _log10(train_eq4),
            "gen_gap": test_eq4 - train_eq4,
            "max_abs_c_dev": self.max_dev(),
            "max_abs_c_dev_init": float((init_coeffs - identity_value(p.model)).abs().max()),
            "coeffs_json": json.dumps([round(float(c), 12) for c in final.flatten()]),
            "iters_to_tol": hit_tol,
            "grad_init_max": grad_init_max,
            "fwd_equiv": 3 * p.batch * steps + n_eval,
            "slope_pred_frob": T.frobenius_slope(p.L),
            "c0_mean": float(self.test.c0.mean()),
            "at_floor": bool(test <= (1e-28 if p.dtype == "float64" else 1e-12) * max(1.0, fixed)),
            "diverged": status == "diverged",
        }
        summary.update(self.spectral_stats(final))
        summary["test_loss_eq4_se"] = L2F.eq4_standard_error(test_layers)  # issue 43: the noise a gap is read against
        if p.model == "warmup" and self.pool is not None and p.path == "spectral":
            summary.update(L2F.lemma2(self.engine, self.pool, final.cpu().numpy().astype(float)))
        if p.theory_checks:
            summary.update(T.lemma1_prop1(self.test.base, self._x0_plain(), self.test.c0, p.K, p.L, p.k_warm))
        flops = minv_forward_flops(p.rows, p.cols, p.K, p.L) * (3 * p.batch * steps + n_eval + 3 * p.n_test)
        return MinvOutcome(status, summary, curve, max(steps, p.K), diverged_step, flops)

    def _x0_plain(self) -> torch.Tensor:
        return self.test.start

    def spectral_stats(self, final: torch.Tensor) -> dict[str, Any]:
        """e0, ||e_K||_inf, ||X_K||_2, Prop. 4's bound and the effective order (Lemma 2)."""
        p = self.p
        dev = self.max_dev()
        with torch.no_grad():
            if p.path == "matrix":
                x = self.engine.final_state(self.test, final)
                xn = float(torch.linalg.matrix_norm(x.to(torch.float64), ord=2).max())
                return {
                    "x_norm_max": xn,
                    "e0_max": math.nan,
                    "e_inf_final": math.nan,
                    "prop4_bound": math.nan,
                    "order_empirical": math.nan,
                }
            sv, e0 = self.test.base, self.test.start
            pos = sv > sv.amax(dim=-1, keepdim=True) * 1e-12
            es = self.engine.spectral_layers(self.test, final)
            e_k = es[-1]
            e0_max = float(torch.where(pos, e0.abs(), torch.zeros_like(e0)).max())
            e_inf = float(torch.where(pos, e_k.abs(), torch.zeros_like(e_k)).max())
            x = torch.where(pos, (1.0 - e_k) / sv.clamp_min(1e-300), torch.zeros_like(sv))
            order = T.empirical_order(es, sv * pos)
        return {
            "x_norm_max": float(x.abs().max()),
            "e0_max": e0_max,
            "e_inf_final": e_inf,
            "prop4_bound": T.prop4_bound(e0_max, p.K, p.L, dev),
            "order_empirical": order,
        }


def run_minv(p: MinvParams, ctx: RunContext) -> MinvOutcome:
    return run_minv_batch([p], [ctx])[0]


def _halving(every: int) -> Callable[[int], float]:
    """StepLR(step_size=every, gamma=0.5) as a LambdaLR factor (halving is exact, so the two agree)."""
    return lambda epoch: 0.5 ** (epoch // every) if every else 1.0


def run_minv_batch(ps: Sequence[MinvParams], ctxs: Sequence[RunContext]) -> list[MinvOutcome]:
    """Algorithm 1 for configs of one batch key, each as if it ran alone (one config: a batch of one).

    Every member keeps its own data, batch order, coefficients (a leaf tensor of its own) and optimiser
    state (a param group of its own, so its own lr and halving schedule); one training step stacks the
    running members' batches and coefficients on a leading axis and evaluates Eq. 4 for all of them at
    once (`over_members`: torch.func.vmap). The summed loss gives each member exactly its own gradient (members
    share no parameter). A member that diverges, is pruned or times out leaves the stack at its own step.
    """
    members = [Trainer(p, ctx) for p, ctx in zip(ps, ctxs, strict=True)]
    engine = members[0].engine  # path, model, order, dtype and device are part of the batch key
    groups = [{"params": [mb.coeffs], "lr": mb.p.lr} for mb in members]
    opt: torch.optim.Optimizer = (
        torch.optim.Adam(groups) if ps[0].optimizer == "adam" else torch.optim.SGD(groups, lr=ps[0].lr)
    )
    # Members of a batch resume from one step (tasks.resume_state.by_resume_step): the schedule starts there.
    resumes = [ctx.resume for ctx in ctxs]
    done = max(0 if ckpt is None else ckpt.step for ckpt in resumes)
    for group in opt.param_groups:
        group["initial_lr"] = group["lr"]  # what LambdaLR needs to start at a later step
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, [_halving(mb.p.lr_halve_every) for mb in members], last_epoch=done - 1
    )

    def member_eq4(base: torch.Tensor, start: torch.Tensor, coeffs: torch.Tensor) -> torch.Tensor:
        return eq4(engine.losses(Batch(base, start, start.new_zeros(base.shape[0])), coeffs))

    batched_eq4 = over_members(member_eq4)
    for mb, ckpt in zip(members, resumes, strict=True):
        if ckpt is None:
            mb.start()
            if not mb.stopped:
                mb.save(0, opt, last=mb.p.iters == 0)
        else:
            mb.restore(ckpt)
            load_optimizer(opt, [mb.coeffs], ckpt.tensors, "opt.")
    live = [i for i, mb in enumerate(members) if not mb.stopped and mb.steps < mb.p.iters]
    for it in range(done + 1, max(p.iters for p in ps) + 1):
        if not live:
            break
        opt.zero_grad()
        batches = [members[i].next_batch() for i in live]
        base = torch.stack([b.base for b in batches])
        start = torch.stack([b.start for b in batches])
        loss = batched_eq4(base, start, torch.stack([members[i].coeffs for i in live]))
        values = loss.detach().tolist()
        running = []
        for j, i in enumerate(live):
            if is_diverged(values[j]):
                members[i].status, members[i].diverged_step = "diverged", it
            else:
                running.append(j)
        loss[running].sum().backward()
        stepping = [live[j] for j in running]
        for i in set(live) - set(stepping):
            members[i].coeffs.grad = None  # a diverged member's (NaN) gradient must not move it
        gnorms, lrs = {}, {}
        for i in stepping:
            mb = members[i]
            assert mb.coeffs.grad is not None
            if it == 1:
                mb.grad_init_max = float(mb.coeffs.grad.max())
            gnorms[i] = float(mb.coeffs.grad.norm())  # before clipping, as the curve reports it
            if mb.p.grad_clip is not None:
                torch.nn.utils.clip_grad_norm_([mb.coeffs], mb.p.grad_clip)
            lrs[i] = opt.param_groups[i]["lr"]
        opt.step()
        for i in stepping:
            if members[i].p.project_box:
                project_box(members[i].coeffs, members[i].p.model)
        sched.step()
        going = []
        for i in stepping:
            mb = members[i]
            more = mb.after_step(it, values[live.index(i)], lrs[i], gnorms[i])
            if mb.status == "ok" and not mb.stopped and mb.save(it, opt, last=not more) and more:
                going.append(i)
        live = going
    return [mb.outcome() for mb in members]
