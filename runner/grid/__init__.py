"""Grid files: loading, validation against each task's params, expansion into cells with stable ids,
and the Arrow schemas a task's runs are stored with."""
