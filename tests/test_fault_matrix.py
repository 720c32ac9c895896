"""CI's slice of the fault matrix (tests/fault_matrix.py, `make faults` for all of it): the driver
killed at random moments with runs of 0.05 s and of 3 s, on a shared Ray. Runs that finished more
than the flush window before the kill are in the store, once each, and nothing else is."""

from __future__ import annotations

import signal

import pytest

from tests.fault_matrix import trial

pytestmark = [pytest.mark.ray, pytest.mark.faults]


@pytest.mark.parametrize(
    ("run_s", "n", "signum", "seed"),
    [
        (0.05, 120, signal.SIGKILL, 0),
        (3.0, 6, signal.SIGKILL, 2),
        (3.0, 6, signal.SIGTERM, 3),
    ],
)
def test_driver_killed_at_a_random_moment_loses_and_doubles_nothing(
    run_s: float, n: int, signum: int, seed: int, ray_local: object
) -> None:
    address = ray_local.get_runtime_context().gcs_address
    outcome = trial(address, run_s, n, signum, seed)
    assert outcome.lost == 0, outcome
    assert outcome.duplicated == 0 and outcome.corrupt == 0, outcome
    if signum == signal.SIGTERM:
        assert outcome.exit_code == 143, outcome
