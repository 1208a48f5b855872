"""Several rigs, one sweep: QUBO sweep points measured by Dask distributed workers.

Each rig host runs `rig worker` (a Dask worker whose resources name the hardware it owns:
`loihi2`, `cpu-tabu`, `cpu-sa`, `host-power`); `rig sweep qubo --cluster ADDRESS` submits one task
per point with the resources it needs, and the submitting process checkpoints every point that
comes back, as a local sweep does. Dask (the `cluster` extra) is imported only here, lazily.

- `resources`: resource names, `--resources` and bench `[worker]` parsing, what a point needs,
  the per-host power lock.
- `points`: what runs on a worker (one point, its SUT kept open between points).
- `dispatch`: the submitting side (`ClusterDispatch`, a `rig.qubo.sweep.PointDispatch`).
- `worker`: `rig worker`, a Dask worker in this process.
- `local`: scheduler and worker processes on this machine (`rig cluster local`, tests, benchmarks).
"""

from __future__ import annotations

from rig.errors import ConfigError


def require_distributed() -> None:
    """Import check for the `cluster` extra: a ConfigError saying what to install."""
    try:
        import distributed  # noqa: F401
    except ImportError as exc:
        raise ConfigError(f"Dask distributed is not installed ({exc})",
                          hint="install the cluster extra: pip install -e '.[cluster]'") from exc
