"""Connecting to Ray: an embedded local instance on loopback, or an existing cluster."""

from cluster.connect import ClusterError, connect, head_lost, shutdown_if_owned, token_available, token_given

__all__ = ["ClusterError", "connect", "head_lost", "shutdown_if_owned", "token_available", "token_given"]
