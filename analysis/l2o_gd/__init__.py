"""Analysis of the l2o_gd learner (paper 001, Math-L2O): figures and claims."""
