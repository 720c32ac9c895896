"""The filesystem underneath the store and the drivers' coordination: a root and its relative paths,
durable writes of small files, directory fsyncs, and create-if-absent. Knows nothing of Parquet, runs
or drivers; works on a local path and on any pyarrow filesystem (S3, GCS)."""
