"""Many deep_linear configs of one shape as one computation: every weight matrix, covariance and
end-to-end product gets a leading config axis, and the learners' products become batched matmuls
(HFTA-style horizontal fusion).

Why a single run of these configs is a batch of one: a stack's product is computed by another kernel
than a plain matrix product (on the CPU numpy's matmul, tasks.deep_linear.flops.stack_product; on a GPU torch's
batched kernel), so the two differ in the last bits, and the exact line search of BCGD amplifies that to
1e-7 relative near the error floor within 80 iterations. The stacked kernel gives every member the same
bits whatever the batch size (products with one column excepted, which is why those configs run alone),
so a member of a batch of 64 equals its single run exactly.

Covered: GD (both step rules) and L2 BCGD with the exact line search (eq. 3.4, one step per member and
layer) or a constant step; the rest (L4 loss, the Thm 3.2 rules and checks, BCSGD) runs alone.

The learners are the single-run ones (`gd_steps`, `gauss_seidel_slots`, `layer_gradients`,
`apply_update` work on a stack as on one matrix); per-member scalars (steps, line-search numerators and
denominators) are tensors with one entry per member. The bookkeeping (tasks.deep_linear.batch_tracker)
judges early stop, divergence, curve, pruning (the member's own `ctx.report`) and deadline per member at
its own step, for all members at once with array operations, exactly as one Tracker per member would
(which small batches, where that is cheaper, use instead).
A member that stops leaves a GD stack (its rows are gathered out; the others' numbers do not change,
the batched kernel being blind to the batch size). In a BCGD stack it stays until every member has
stopped (its rows keep computing, possibly NaN, touching no other member's rows): the sweep caches
products of every row, and cutting them all would cost more than the rows it saves.
"""

from __future__ import annotations

from collections.abc import Generator, Hashable, Sequence

import numpy as np
import torch

from tasks.base import Checkpoint, FieldType, Result, RunContext
from tasks.deep_linear.batch_tracker import BatchTracker, Bookkeeping, MemberTrackers
from tasks.deep_linear.bcgd import apply_update, layer_gradients
from tasks.deep_linear.flops import FlopCounter, Product, stack_product
from tasks.deep_linear.gd import gd_steps
from tasks.deep_linear.objective import L2Objective
from tasks.deep_linear.params import AnyParams, BCGDParams, GDParams
from tasks.deep_linear.sweep import gauss_seidel_slots
from tasks.deep_linear.tracker import Setup, initial_weights, prepare, restored_weights, weight_tensors
from tasks.resume_state import by_resume_step

# Below this many members one Tracker per member costs less than a BatchTracker's array operations. Measured
# on this project's 2-core CPU (steps and results, per step, three runs): 1 member 3 us with Trackers against
# 19-36 us, 8 members 16-19 against 22-36, 16 members 35-61 against 26-44, 64 members 135-144 against 50-77
PER_MEMBER_BELOW = 12

# (layer updated, each member's step, the stacked end-to-end matrices after the update)
BatchUpdate = tuple[int, np.ndarray, torch.Tensor]


def batch_key(p: AnyParams) -> Hashable | None:
    """Algorithm, step rule, sweep order, shapes and dtype: what one stacked computation must share.
    Seeds, data, init, step sizes, tolerances and budgets vary per member."""
    if isinstance(p, GDParams):
        rule: tuple[str, ...] = ()
    elif isinstance(p, BCGDParams) and p.loss == "l2" and p.lr_rule in ("opt", "const") and not p.check_thm32:
        rule = (p.order, p.lr_rule)
    else:
        return None
    widths = p.layer_widths()
    if min(widths[:-1]) < 2 or p.m < 2:
        return None  # a one-column product: torch's batched kernel then differs in rounding with the batch size
    return (p.algo, *rule, tuple(widths), p.dtype)


def batch_bytes(p: AnyParams) -> int:
    """One member's device memory: weights, their updates and gradients, the cached prefix and suffix
    products, the covariances, the data and the error metric's factors."""
    w = p.layer_widths()
    d_in, d_out, depth = w[0], w[-1], len(w) - 1
    weights = sum(w[j] * w[j - 1] for j in range(1, depth + 1))
    products = sum(w[j] * (d_in + d_out) for j in range(1, depth + 1))
    data = (d_in + d_out) * p.m + 2 * d_in * d_in + 6 * d_out * d_in
    itemsize = 8 if p.dtype == "float64" else 4
    return itemsize * (4 * weights + products + data)


def run_batch(
    ps: Sequence[AnyParams],
    ctxs: Sequence[RunContext],
    summary_fields: dict[str, FieldType],
    per_member: bool | None = None,
) -> list[Result]:
    """One Result per member, each equal to the member's single run (see the module docstring).
    `per_member`: keep the books with one Tracker per member (True) or with a BatchTracker (False), which give
    the same Results; None: whichever is cheaper for this many members (PER_MEMBER_BELOW)."""
    keys = {batch_key(p) for p in ps}
    if len(keys) != 1 or None in keys:
        raise ValueError(f"deep_linear.run_batch needs configs of one batch key; got {sorted(map(str, keys))}")
    grouped = by_resume_step(ps, ctxs, lambda qs, cs: run_batch(qs, cs, summary_fields, per_member))
    if grouped is not None:
        return grouped
    device = ctxs[0].device
    setups = [prepare(p, summary_fields, device, ws) for p, ws in zip(ps, initial_weights(ps), strict=True)]
    # every member counts the same operations: one counter stands for each; its kernel is the batch key's
    counter = FlopCounter(stack_product(ps[0].layer_widths(), setups[0].ws[0].dtype, device))
    if per_member is None:
        per_member = len(ps) < PER_MEMBER_BELOW
    books: Bookkeeping = (MemberTrackers if per_member else BatchTracker)(ps, setups, counter, ctxs)
    resumes = [ctx.resume for ctx in ctxs]
    starts = [restored_weights(r) for r in resumes if r is not None]
    going = books.restore([r.state for r in resumes if r is not None]) if starts else books.start()
    if going.any():
        inits = starts or [s.ws for s in setups]
        ws = [torch.stack([w[j] for w in inits]).to(device) for j in range(len(inits[0]))]
        sxx = torch.stack([s.prob.sxx for s in setups])
        syx = torch.stack([s.prob.syx for s in setups])
        compacts = ps[0].algo == "gd"  # GD's state is its weights: dropping stopped rows is one gather
        updates = (
            _gd(ps, setups, sxx, syx, ws, counter, resumed=bool(starts))
            if compacts
            else _bcgd(ps, sxx, syx, ws, counter)
        )
        errors = _Errors(setups, counter.product)
        rows = np.arange(len(ps))  # the member of each row of the stack
        saves = any(ctx.checkpointer is not None for ctx in ctxs)
        keep: list[int] | None = None
        t = resumes[0].step if starts and resumes[0] is not None else 0
        while going.any():
            t += 1
            layer, lrs, m = updates.send(keep)
            going = books.step(t, rows, errors(m, keep), lrs, layer)
            if saves and t % setups[0].per_sweep == 0:  # between sweeps: see DeepLinearTask.run
                going = _checkpoint(books, ctxs, t, rows, ws, going)
            alive = np.flatnonzero(going[rows])
            keep = alive.tolist() if compacts and 0 < len(alive) < len(rows) else None
            if keep is not None:
                rows = rows[alive]
    return books.results()


def _checkpoint(
    books: Bookkeeping,
    ctxs: Sequence[RunContext],
    t: int,
    rows: np.ndarray,
    ws: list[torch.Tensor],
    going: np.ndarray,
) -> np.ndarray:
    """Offer each member's state after iteration `t` to its `ctx.checkpoint` (members that go on, and those
    whose budget ended here); a member preempted stops. The members that go on."""
    for pos, i in enumerate(rows.tolist()):
        on = bool(going[i])
        if not on and not books.ended_by_budget(i, t):
            continue

        def build(i: int = i, pos: int = pos) -> Checkpoint:
            return Checkpoint(t, weight_tensors([w[pos] for w in ws]), books.member_state(i))

        if not ctxs[i].checkpoint(t, build, last=not on) and on:
            going = books.preempt(i)
    return going


def _gd(
    ps: Sequence[AnyParams],
    setups: Sequence[Setup],
    sxx: torch.Tensor,
    syx: torch.Tensor,
    ws: list[torch.Tensor],
    counter: FlopCounter,
    resumed: bool = False,
) -> Generator[BatchUpdate, list[int] | None, None]:
    """GD on the stack; rows sent back (members that stopped dropped) are all that compute next.
    `resumed`: the weights are checkpoints' (tasks.deep_linear.gd.gd_steps)."""
    lr_list = [s.lr_const for s in setups]
    # the single run multiplies by the Python float lr * grad_scale; the same number in the weights' dtype
    step = [lr * p.grad_scale for lr, p in zip(lr_list, ps, strict=True)]
    lrs = np.array(lr_list)
    steps = torch.tensor(step, dtype=ws[0].dtype, device=ws[0].device).view(-1, 1, 1)
    learner = gd_steps(sxx, syx, ws, steps, counter, resumed)
    m = next(learner)
    while True:
        keep = yield -1, lrs, m
        if keep is not None:
            lrs = lrs[keep]
        m = learner.send(keep)


def _bcgd(
    ps: Sequence[AnyParams], sxx: torch.Tensor, syx: torch.Tensor, ws: list[torch.Tensor], counter: FlopCounter
) -> Generator[BatchUpdate, list[int] | None, None]:
    """bcgd() for L2 with the exact line search or a constant step, every member its own step. Rows sent
    back are ignored: the sweep caches products of every row, so stopped members compute on."""
    first = ps[0]
    assert isinstance(first, BCGDParams)  # batch_key admits GD and these BCGD configs only
    d_out, d_in = syx.shape[-2:]
    scale = torch.tensor([float(p.grad_scale) for p in ps], dtype=torch.float64, device=sxx.device)
    const = torch.tensor(
        [float(p.lr) for p in ps if isinstance(p, BCGDParams) and p.lr is not None], dtype=torch.float64
    ).to(sxx.device)
    for slot in gauss_seidel_slots(ws, first.order, counter):
        r = counter.mm(slot.m, sxx) - syx
        counter.add(d_out * d_in)
        g, ag, d, q, g2 = layer_gradients(slot, r, sxx, counter)
        if first.lr_rule == "const":
            eta = const
        else:
            # the single run divides Python floats (doubles) and takes 0 for 0/0 (spec G10): the same here
            q64, g64 = q.double(), g2.double()
            eta = torch.where(q64 > 0, g64 / q64, torch.zeros_like(q64))
        step = (eta * scale).to(ws[0].dtype).view(-1, 1, 1)
        m_new = apply_update(ws, slot, step, g, ag, d, first.order, counter)
        yield slot.i, eta.cpu().numpy(), m_new


class _Errors:
    """The members' L2 errors from the stacked end-to-end matrices: L2Objective.err's arithmetic, stacked when
    every member's X factor has the same shape (the usual case: X of full rank), else member by member. Called
    with the rows kept when the stack drops members, it drops the same ones."""

    def __init__(self, setups: Sequence[Setup], product: Product) -> None:
        self.product = product  # the learner's kernel (tasks.deep_linear.flops.stack_product)
        objs = [s.obj for s in setups]
        self.objs = [o for o in objs if isinstance(o, L2Objective)]
        assert len(self.objs) == len(objs)  # batch_key admits the L2 loss only
        self.stacked = len({o.xh.shape for o in self.objs}) == 1
        # L2Objective.err's last two operations, on doubles: the sum of squares / m - offset
        self.m = np.array([o.m for o in self.objs], dtype=np.float64)
        self.offset = np.array([o.offset for o in self.objs], dtype=np.float64)
        if self.stacked:
            self.w_ls = torch.stack([o.w_ls for o in self.objs])
            self.xh = torch.stack([o.xh for o in self.objs])

    def __call__(self, m: torch.Tensor, keep: list[int] | None) -> np.ndarray:
        if keep is not None:
            self.objs = [self.objs[pos] for pos in keep]
            self.m, self.offset = self.m[keep], self.offset[keep]
            if self.stacked:
                rows = torch.tensor(keep, device=m.device)
                self.w_ls, self.xh = self.w_ls[rows], self.xh[rows]
        if self.stacked:
            sums = self._sums_of_squares(m, self.w_ls, self.xh)
        else:  # each member as a stack of one: the products of its single run
            sums = np.concatenate(
                [self._sums_of_squares(m[i : i + 1], o.w_ls[None], o.xh[None]) for i, o in enumerate(self.objs)]
            )
        return sums / self.m - self.offset

    def _sums_of_squares(self, m: torch.Tensor, w_ls: torch.Tensor, xh: torch.Tensor) -> np.ndarray:
        """||(M - W_ls) X_h||_F^2 of each matrix of the stacks, as doubles."""
        e = self.product(m - w_ls, xh)
        return (e * e).sum((-2, -1)).double().cpu().numpy()  # float32 sums widen exactly, as float() does
