"""l2o_gd: paper 001 (Song, Lin & Xu, "Learning Provably Improves the Convergence of Gradient Descent").

Math-L2O: a coordinate-wise MLP learns per-coordinate step multipliers P_t in (0, 2) of gradient descent
on N under-determined least-squares problems. Modules: params (the schema), problem (data, beta, beta_0,
GD baselines), model (the MLP and its deterministic initialisation), unroll (the T-step trajectory, with
detached, full or frozen features), metrics (improvement ratios), diagnostics (spec section 4 quantities
of a trained net), theory (Thm 4.7 conditions in log space), train (the epoch loop), task (the protocol).
"""
