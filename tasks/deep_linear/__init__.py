"""deep_linear: layer-wise BCGD for deep linear networks (paper 002, Shin), see docs/deep_linear.md.

Modules: params (pydantic schema), data / data_real (synthetic and local real data, the optimum),
init (initialisations), sweep (Gauss-Seidel bookkeeping), bcgd / gd / bcsgd (learners), objective
(error metrics, L4 optimum), flops (cost model), theory (rates and constants), task (the Task).
"""
