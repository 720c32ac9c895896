"""The bookkeeping LD-Minv's trainer (`train_minv.Trainer`) and a D-SVD batch member (`train_dsvd.Member`)
keep alike: which iterations log a curve row, the checkpoint saves, and a logged row's test loss and
report, each of which may stop the run."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tasks.base import Checkpoint, RunContext, is_diverged
from tasks.ldminv.params import DsvdParams, MinvParams


class RunBooks:
    """Mixed into a run's state, which holds these attributes and its own `checkpoint(it, optimiser)`."""

    p: MinvParams | DsvdParams
    ctx: RunContext
    status: str
    diverged_step: int | None
    stopped: bool
    checkpoint: Callable[[int, Any], Checkpoint]

    def logs(self, it: int) -> bool:
        """Whether this config's curve has a row at iteration `it`."""
        return it == 0 or it % self.p.log_every == 0 or it == self.p.iters

    def save(self, it: int, opt: Any, last: bool) -> bool:
        """`ctx.checkpoint` after iteration `it`; False (stopped, preempted) when the run must stop now."""
        if self.ctx.checkpoint(it, lambda: self.checkpoint(it, opt), last=last):
            return True
        self.stopped = True
        return False

    def reported(self, it: int, train_loss: float, test_loss: float) -> bool:
        """A logged row's test loss, then its report: False when the run stops here (the test loss diverged, or
        the report answered stop)."""
        if is_diverged(test_loss):
            self.status, self.diverged_step = "diverged", it
            return False
        if not self.ctx.report(it, train_loss=train_loss, test_loss=test_loss):
            self.stopped = True
            return False
        return True
