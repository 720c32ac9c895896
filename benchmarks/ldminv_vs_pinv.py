"""Table 1 of paper 000: inference time of LD-Minv against torch.linalg.pinv, batch 100, float32.

    python benchmarks/ldminv_vs_pinv.py                      # CPU: sizes up to 200x300
    python benchmarks/ldminv_vs_pinv.py --max-size 1000      # CPU, larger sizes too
    python benchmarks/ldminv_vs_pinv.py --device cuda        # all of Table 1 (up to 1000x1500)

For each matrix size of Table 1 and each (K, L) pair of its rows, times one LD-Minv forward pass over
a batch of 100 matrices (c0 = ||A||_F^2 included; the coefficients' values do not change the cost, so
D-Minv costs the same), and torch.linalg.pinv batched over the 100 matrices and looped one by one.
Warm-up runs are excluded; CUDA is synchronised before every clock read. Prints the median over
--repeats of each time, the paper's seconds beside ours, and the ratios pinv / LD-Minv.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tasks.ldminv import matrix_path as MP

SIZES = [(10, 15), (50, 75), (100, 150), (200, 300), (500, 750), (1000, 1500)]
PAIRS = [(4, 4), (8, 4), (12, 4), (5, 4), (5, 8), (5, 12)]  # (K, L), rows of Table 1
PAPER_LD = {  # (K, L) -> seconds per size, Table 1
    (4, 4): [0.0030, 0.0070, 0.010, 0.025, 0.40, 1.23],
    (8, 4): [0.0052, 0.0088, 0.016, 0.047, 0.56, 2.22],
    (12, 4): [0.0083, 0.0133, 0.019, 0.055, 0.64, 3.08],
    (5, 4): [0.0035, 0.0050, 0.013, 0.025, 0.38, 1.38],
    (5, 8): [0.0058, 0.0076, 0.014, 0.051, 0.55, 2.42],
    (5, 12): [0.0084, 0.013, 0.020, 0.059, 0.68, 3.53],
}
PAPER_PINV = [0.46, 0.58, 1.21, 2.60, 11.39, 39.49]


def timed(fn: Callable[[], object], device: str, repeats: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def ldminv_forward(a: torch.Tensor, coeffs: torch.Tensor, order: int) -> torch.Tensor:
    with torch.no_grad():
        c0 = MP.c0_matrix(a, "fro", 1.0)
        x0 = MP.initial_x(a, c0, 0, order)
        return MP.ldminv(a, x0, coeffs, "hyperpower", order)[-1]


def pinv_loop(a: torch.Tensor) -> list[torch.Tensor]:
    return [torch.linalg.pinv(a[j]) for j in range(a.shape[0])]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument(
        "--max-size", type=int, default=None, help="largest row count to run (default: 200 on CPU, all on CUDA)"
    )
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    ap.add_argument("--no-loop", action="store_true", help="skip the per-matrix pinv loop")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    max_rows = args.max_size if args.max_size is not None else (200 if args.device == "cpu" else 10**9)
    dev = args.device
    g = torch.Generator().manual_seed(0)
    name = torch.cuda.get_device_name(0) if dev.startswith("cuda") else f"CPU, {torch.get_num_threads()} threads"
    print(f"# LD-Minv vs torch.linalg.pinv, float32, batch {args.batch}, {name}, median of {args.repeats}")
    print(
        f"{'size':>10} {'K':>3} {'L':>3} {'LD-Minv s':>10} {'paper s':>8} {'pinv batched':>12} {'pinv loop':>10} "
        f"{'batched/LD':>10} {'loop/LD':>8} {'paper pinv/LD':>13}"
    )
    for i, (m, n) in enumerate(SIZES):
        if m > max_rows:
            continue
        a = (torch.randn(args.batch, m, n, generator=g) / max(m, n) ** 0.5).to(dev)
        t_batched = timed(partial(torch.linalg.pinv, a), dev, args.repeats, args.warmup)
        t_loop = float("nan")
        if not args.no_loop:
            t_loop = timed(partial(pinv_loop, a), dev, args.repeats, args.warmup)
        for k, order in PAIRS:
            coeffs = (1.0 + 0.01 * torch.randn(k, order, generator=g)).to(dev)
            t_ld = timed(partial(ldminv_forward, a, coeffs, order), dev, args.repeats, args.warmup)
            paper = PAPER_LD[(k, order)][i]
            print(
                f"{m:>4}x{n:<5} {k:>3} {order:>3} {t_ld:>10.4f} {paper:>8.4f} {t_batched:>12.4f} {t_loop:>10.4f} "
                f"{t_batched / t_ld:>10.2f} {t_loop / t_ld:>8.2f} {PAPER_PINV[i] / paper:>13.1f}",
                flush=True,
            )  # fmt: skip - the columns of the printed table line up in the source
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
