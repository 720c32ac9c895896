"""least_squares: constant-step GD on linear least squares (the runner's own test learner)."""
