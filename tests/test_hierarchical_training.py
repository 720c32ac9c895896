"""hierarchical: gradients of the training objective against finite differences, the protocols'
trainable sets, frozen layers that really do not move, and the zero-init saddle of spec 6.2."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from pydantic import TypeAdapter

from tasks import get_task
from tasks.base import RunContext
from tasks.hierarchical.data import make_data
from tasks.hierarchical.densenet import DenseNet
from tasks.hierarchical.params import DenseNetParams, HierarchicalParams, WKParams
from tasks.hierarchical.schedule import phases
from tasks.hierarchical.target import make_target
from tasks.hierarchical.train_wk import Trainer
from tasks.hierarchical.wk_model import initial_distill, output

ADAPTER = TypeAdapter(HierarchicalParams)
SMALL: dict[str, Any] = {"d": 6, "n_mc": 4000, "n_train": 300, "n_val": 50, "n_test": 300, "m": 8, "batch": 50}


def wk(**kw: Any) -> WKParams:
    p = ADAPTER.validate_python({"learner": "wk", **SMALL, **kw})
    assert isinstance(p, WKParams)
    return p


def trainer(p: WKParams) -> Trainer:
    target = make_target(p)
    return Trainer(p, target, make_data(target, p), RunContext())


def directional_check(f: Any, tensors: list[torch.Tensor], seed: int = 0) -> None:
    """<grad f, V> against the central difference (f(t + eps V) - f(t - eps V)) / (2 eps)."""
    g = torch.Generator().manual_seed(seed)
    for t in tensors:
        t.requires_grad_(True)
    value = f()
    grads = torch.autograd.grad(value, tensors)
    for t, grad in zip(tensors, grads, strict=True):
        v = torch.randn(t.shape, generator=g, dtype=t.dtype)
        eps = 1e-6
        with torch.no_grad():
            t.add_(eps * v)
            up = float(f())
            t.sub_(2 * eps * v)
            down = float(f())
            t.add_(eps * v)
        fd = (up - down) / (2 * eps)
        assert float((grad * v).sum()) == pytest.approx(fd, rel=1e-6, abs=1e-9)


@pytest.mark.parametrize("trunc", [None, 2.0])
def test_objective_gradients_match_finite_differences(trunc: float | None) -> None:
    """Loss (with the truncated activation when set), the lam3..5 distillation terms and weight decay."""
    p = wk(
        L=4,
        k=[3, 2, 2],
        protocol="all_from_start",
        k_init=0.5,
        w_init=0.5,
        trunc_b=trunc,
        lam_mult=1.0,
        wd=1e-3,
        lam_ratios=[1.0, 0.5, 0.25],
    )
    tr = trainer(p)
    phase = phases(p)[0]
    x, y = tr.xtr[:40], tr.ytr[:40]

    def objective() -> torch.Tensor:
        pred = output(tr.net, x, phase.top, truncated=trunc is not None)
        return ((pred - y) ** 2).mean() + tr.regulariser(phase)

    directional_check(objective, tr.net.tensors())


@pytest.mark.parametrize("act", ["square", "quad_lin", "relu"])
def test_densenet_gradients_match_finite_differences(act: str) -> None:
    p = ADAPTER.validate_python({"learner": "densenet", **SMALL, "L": 3, "k": [3, 2], "activation": act})
    assert isinstance(p, DenseNetParams)
    target = make_target(p)
    data = make_data(target, p)
    net = DenseNet(p, target, data.train.x, "cpu")
    x, y = data.train.x[:30], data.train.y[:30]
    directional_check(lambda: ((net(x) - y) ** 2).mean(), net.params(), seed=1)


def test_zero_w_is_a_stationary_point() -> None:
    """Spec 6.2: with sigma = z^2, the gradient of the loss w.r.t. W_l at W_l = 0 is exactly 0."""
    p = wk(L=3, k=[3, 2], w_init=0.0)
    tr = trainer(p)
    w = tr.net.w[2].requires_grad_(True)
    loss = ((output(tr.net, tr.xtr, 2) - tr.ytr) ** 2).mean()
    (grad,) = torch.autograd.grad(loss, [w])
    assert torch.count_nonzero(grad) == 0


def test_protocol_trainable_sets() -> None:
    sets = {ph.name: (set(ph.train_w), set(ph.train_k)) for ph in phases(wk(L=4, k=[3, 2, 2]))}
    assert sets["3D"] == ({2, 3}, {2}) and sets["4N"] == ({2, 3, 4}, {2, 3, 4}) and sets["final"][0] == {2, 3, 4}
    sets = {ph.name: (set(ph.train_w), set(ph.train_k)) for ph in phases(wk(L=4, k=[3, 2, 2], protocol="layerwise"))}
    assert sets["3D"] == ({3}, set()) and sets["3N"] == ({3}, {3}) and sets["final"] == ({4}, {4})
    p = wk(L=4, k=[3, 2, 2], protocol="window", window=1)
    sets = {ph.name: (set(ph.train_w), set(ph.train_k)) for ph in phases(p)}
    assert sets["3D"] == ({2, 3}, {2}) and sets["4N"] == ({3, 4}, {3, 4}) and sets["final"] == ({3, 4}, {3, 4})
    # window >= L - 2 is joint; the all-from-start run has the same total epochs as the staged one
    assert [(ph.train_w, ph.train_k) for ph in phases(wk(L=4, k=[3, 2, 2], protocol="window", window=2))] == [
        (ph.train_w, ph.train_k) for ph in phases(wk(L=4, k=[3, 2, 2]))
    ]
    staged = sum(ph.epochs for ph in phases(wk(L=4, k=[3, 2, 2])))
    assert sum(ph.epochs for ph in phases(wk(L=4, k=[3, 2, 2], protocol="all_from_start"))) == staged


def test_frozen_layers_do_not_move_under_layerwise() -> None:
    common = {"L": 3, "k": [3, 2], "epochs_per_stage": 2, "final_epochs": 2}
    out = trainer(wk(protocol="layerwise", **common)).run()
    assert out.status == "ok"
    assert torch.equal(out.net.w[2], out.snapshots["pre_w"][2])  # bit for bit after stage 2
    assert torch.equal(out.net.k[2], out.snapshots["pre_k"][2])
    assert out.summary["fe2_after_l2"] == out.summary["fe2_after_l3"] == out.summary["fe_orth_l2"]
    joint = trainer(wk(**common)).run()
    assert not torch.equal(joint.net.w[2], joint.snapshots["pre_w"][2])  # joint keeps training layer 2
    # paired: both protocols reach the end of stage 2 in the same state
    assert torch.equal(joint.snapshots["pre_w"][2], out.snapshots["pre_w"][2])


def test_kept_optimiser_state_is_the_only_difference_between_the_modes() -> None:
    """opt_state keep vs reset (issue 29): plain SGD (momentum 0) has no state, so the two modes are the same
    run bit for bit; with Adam they differ from the first step of the second phase on (its moments carry over)
    and not before; a tensor frozen by the layer-wise protocol stays bit for bit where stage 2 left it."""
    common = {"L": 3, "k": [3, 2], "epochs_per_stage": 2, "final_epochs": 2, "log_every": 1}
    sgd = {**common, "optimizer": "sgd", "momentum": 0.0, "lr": 0.02, "final_lr": 0.005}
    a, b = (trainer(wk(opt_state=mode, **sgd)).run() for mode in ("reset", "keep"))
    assert a.summary == b.summary and a.curve == b.curve
    reset, keep = (trainer(wk(opt_state=mode, **common)).run() for mode in ("reset", "keep"))
    first_phase = common["epochs_per_stage"]  # stage 2^Delta: one optimiser either way
    assert reset.curve["test_mse"][: first_phase + 1] == keep.curve["test_mse"][: first_phase + 1]
    assert reset.curve["test_mse"][first_phase + 1] != keep.curve["test_mse"][first_phase + 1]
    frozen = trainer(wk(protocol="layerwise", opt_state="keep", **common)).run()
    assert torch.equal(frozen.net.w[2], frozen.snapshots["pre_w"][2])
    assert torch.equal(frozen.net.k[2], frozen.snapshots["pre_k"][2])


def test_joint_training_corrects_lower_features_in_miniature() -> None:
    """A quick BFC check (d = 8, L = 3): joint ends with a lower test error and layer-2 feature error
    than layer-wise, on the same target, data and init (the full claim is grid C1/C2)."""
    common = {
        "d": 8,
        "L": 3,
        "k": [4, 2],
        "n_train": 6000,
        "n_test": 2000,
        "m": 16,
        "batch": 100,
        "epochs_per_stage": 4,
        "final_epochs": 4,
        "log_every": 100,
    }
    joint = trainer(wk(**common)).run().summary
    lw = trainer(wk(protocol="layerwise", **common)).run().summary
    assert joint["test_mse"] < lw["test_mse"]
    assert joint["fe_orth_l2"] < lw["fe_orth_l2"] == lw["fe2_after_l2"]
    assert joint["fe_lin_l2"] < lw["fe_lin_l2"] and joint["fe_orth_l3"] < lw["fe_orth_l3"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
@pytest.mark.parametrize("example", [0, 4, 6], ids=["wk", "densenet", "kernel_ntk"])
def test_cuda_runs_match_cpu(example: int) -> None:
    """Every learner computes on ctx.device: the same float64 run on CUDA equals the CPU run up to
    reduction order (data and target are drawn on the CPU in float64, so both see the same inputs)."""
    task = get_task("hierarchical")
    p = ADAPTER.validate_python(task.examples[example])
    cpu = task.run(p, RunContext()).summary
    gpu = task.run(p, RunContext(device="cuda")).summary
    for key in ("test_mse", "train_mse", "val_mse"):
        assert gpu[key] == pytest.approx(cpu[key], rel=1e-6), key
    if isinstance(p, WKParams):
        f32 = task.run(p.model_copy(update={"dtype": "float32"}), RunContext(device="cuda")).summary
        assert f32["test_mse"] == pytest.approx(cpu["test_mse"], rel=0.05)


@pytest.mark.parametrize("flip", [False, True])
def test_initial_distill_does_not_depend_on_the_svd_s_signs(flip: bool) -> None:
    """LAPACK and cuSOLVER return a singular pair as (u_i, v_i) or (-u_i, -v_i); the distilled K must be the
    same either way (the learner's output is not invariant to a sign of one of K's rows). Flipping the
    sign of W's skip block flips every u_i: K's skip part keeps its signs, its previous-layer part flips.
    Independently, K_skip^T K_prev is the top-k part of W_skip^T W_prev, which no sign choice changes."""
    g = torch.Generator().manual_seed(3)
    w = torch.randn(9, 11, generator=g, dtype=torch.float64)
    split, k = 5, 3
    if flip:
        w = torch.cat([-w[:, :split], w[:, split:]], dim=1)
    out = initial_distill(w, split, k)
    skip, prev = out[:, :split], out[:, split:]
    assert (skip.gather(1, skip.abs().argmax(1, keepdim=True)) > 0).all()
    ref = initial_distill(torch.cat([-w[:, :split], w[:, split:]], dim=1), split, k)
    torch.testing.assert_close(skip, ref[:, :split], rtol=0, atol=1e-12)
    torch.testing.assert_close(prev, -ref[:, split:], rtol=0, atol=1e-12)
    u, s, vh = torch.linalg.svd(w[:, :split].T @ w[:, split:])
    torch.testing.assert_close(skip.T @ prev, (u[:, :k] * s[:k]) @ vh[:k], rtol=0, atol=1e-12)
