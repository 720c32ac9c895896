"""The kernel behind deep_linear's stacked products (tasks.deep_linear.flops.stack_product): torch's `a @ b`
against numpy's matmul on the same stacks of square matrices, one thread, on this machine's CPU.

    python benchmarks/stacked_products.py [--repeats 5] [--stacks 1,64,256] [--widths 8,16,32,64,128]

Each (dtype, stack, width) times both contenders interleaved, `--repeats` rounds of enough products to
take ~20 ms; printed is the fastest time per product of each, and the ratio torch / numpy (above 1:
numpy's is faster), plain and with the right operand transposed (a view, as the learners pass it).
Stacks wider than 64 (`ONE_THREAD_MNK`) and float32 stay with torch in `stack_product`, whatever this says.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads its OpenBLAS: one thread, as a worker
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402 - after the thread counts are set
import torch  # noqa: E402

from benchmarks.machine import header  # noqa: E402


def fastest(contenders: dict[str, Callable[[], object]], n: int, repeats: int) -> dict[str, float]:
    """Each contender's fastest time per call over `repeats` rounds, the contenders taking turns in each."""
    best = dict.fromkeys(contenders, float("inf"))
    for _ in range(repeats):
        for name, fn in contenders.items():
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            best[name] = min(best[name], (time.perf_counter() - t0) / n)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--stacks", default="1,64,256")
    parser.add_argument("--widths", default="8,16,32,64,128")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(header())
    print("dtype    stack width   torch us   numpy us   torch/numpy   with b transposed")
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float64, torch.float32):
        for stack in map(int, args.stacks.split(",")):
            for width in map(int, args.widths.split(",")):
                a, b = (torch.randn(stack, width, width, generator=g, dtype=dtype) for _ in range(2))
                n = max(5, int(2e6 / (stack * width**3)))
                ratios = []
                for right in (b, b.mT):
                    contenders = {
                        "torch": lambda a=a, right=right: a @ right,
                        "numpy": lambda a=a, right=right: torch.from_numpy(np.matmul(a.numpy(), right.numpy())),
                    }
                    for fn in contenders.values():
                        fn()  # first-call costs out
                    times = fastest(contenders, n, args.repeats)
                    ratios.append(times["torch"] / times["numpy"])
                    if right is b:
                        plain = times
                print(
                    f"{str(dtype).removeprefix('torch.'):8s} {stack:5d} {width:5d} {1e6 * plain['torch']:10.1f} "
                    f"{1e6 * plain['numpy']:10.1f} {ratios[0]:13.2f} {ratios[1]:19.2f}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
