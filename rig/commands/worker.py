"""`rig worker --scheduler tcp://HOST:8786 --bench FILE | --resources ...`: this host's rig as a
Dask worker for sweeps run with `rig sweep qubo --cluster` (see rig/cluster)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rig.errors import ConfigError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("worker", help="serve this host's SUTs to a sweep cluster (Dask worker)")
    p.add_argument("--scheduler", required=True, metavar="ADDRESS",
                   help="the Dask scheduler, e.g. tcp://lab-server:8786")
    p.add_argument("--bench", type=Path, metavar="FILE",
                   help="a bench file whose [worker] table names what this host owns "
                        "(e.g. benches/workers/cpu-baseline.toml)")
    p.add_argument("--resources", metavar="LIST",
                   help="what this host owns instead of --bench, e.g. "
                        "cpu-tabu=1,cpu-sa=1,host-power=1 (known: cpu-tabu, cpu-sa, loihi2, "
                        "xylo, host-power; one each)")
    p.add_argument("--name", help="the worker's name (default: the bench's, else the host name)")
    p.add_argument("--listen-host", metavar="IP",
                   help="the address the worker listens on (default: chosen by Dask)")
    p.add_argument("--nthreads", type=int, default=None,
                   help="threads (default: one per SUT it owns)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from rig.cluster.resources import bench_resources, parse_resources
    from rig.cluster.worker import serve_worker

    if (args.bench is None) == (args.resources is None):
        raise ConfigError("rig worker needs --bench FILE or --resources LIST (one of them)",
                          hint="e.g. --resources cpu-tabu=1,cpu-sa=1,host-power=1")
    if args.nthreads is not None and args.nthreads < 1:
        raise ConfigError(f"--nthreads {args.nthreads}: expected 1 or more")
    name = args.name
    if args.bench is not None:
        resources, bench_name = bench_resources(args.bench)
        name = name or bench_name
    else:
        resources = parse_resources(args.resources)
    serve_worker(args.scheduler, resources, name=name, listen_host=args.listen_host,
                 nthreads=args.nthreads, say=lambda line: print(line, flush=True))
    return 0
