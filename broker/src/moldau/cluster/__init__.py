"""A local cluster of real broker processes: `LocalCluster` for tests and benchmarks, and the
`moldau cluster up|status|down` command."""

from moldau.cluster.launcher import (
    ClusterError,
    ClusterNode,
    ClusterStartError,
    LocalCluster,
    free_base_port,
)
from moldau.cluster.probe import ClusterView, PartitionState, ProbeError, QuorumView

__all__ = [
    "ClusterError", "ClusterNode", "ClusterStartError", "ClusterView", "LocalCluster",
    "PartitionState", "ProbeError", "QuorumView", "free_base_port",
]
