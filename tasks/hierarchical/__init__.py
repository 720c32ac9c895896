"""hierarchical: paper 004 (Allen-Zhu & Li, "Backward Feature Correction: How Deep Learning Performs
Deep Learning"). Modules: params (the schema), target (the spec 1.7 generator), data (splits),
wk_model (the K/W learner of spec 2.2), schedule (protocols as phases), train_wk (its training and
per-stage metrics), densenet (the plain DenseNet of spec 2.1), kernels (C6 baselines), metrics,
flops (cost model of spec 5), task (the Task protocol)."""
