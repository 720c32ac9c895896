"""A learner outside the tasks package, registered through CONVGRID_LEARNERS (faulty=tests.toy_learner)."""
