"""The ingest benchmark's learner (benchmarks/ingest.py), registered there as
CONVGRID_LEARNERS=synth=benchmarks.ingest_learner: a run that returns at once with a curve of `steps`
rows, so that what is measured is the path a record takes from an actor to the store, not the learner."""
