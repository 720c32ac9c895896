"""Connecting to Ray: an embedded local instance on loopback, or an existing cluster."""

from cluster.connect import connect, shutdown_if_owned

__all__ = ["connect", "shutdown_if_owned"]
