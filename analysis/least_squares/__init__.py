"""Figure and claims of the least_squares learner (constant-step GD, whose theory is complete)."""
