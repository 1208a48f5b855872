"""QUBO benchmark (NeuroBench MIS workloads): graphs, cost, best-known targets."""

from rig.qubo.workloads import (
    DENSITIES,
    WORKLOAD_SIZES,
    Workload,
    WorkloadError,
    cost,
    dense_q,
    gap,
    generate,
    qubo_terms,
)

__all__ = [
    "DENSITIES",
    "WORKLOAD_SIZES",
    "Workload",
    "WorkloadError",
    "cost",
    "dense_q",
    "gap",
    "generate",
    "qubo_terms",
]
