"""`rig cluster local --workers N`: a Dask scheduler and N rig workers on this machine, to try
`rig sweep qubo --cluster` without a lab (Ctrl-C stops them all)."""

from __future__ import annotations

import argparse
import signal
import tempfile
import time
from pathlib import Path

from rig.errors import ConfigError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cluster", help="a sweep cluster on this machine, to try --cluster")
    actions = p.add_subparsers(dest="cluster_action", metavar="ACTION", required=True)
    q = actions.add_parser("local", help="start a Dask scheduler and N rig workers here")
    q.add_argument("--workers", type=int, default=2, help="how many workers (default 2)")
    q.add_argument("--port", type=int, default=8786,
                   help="the scheduler's port on 127.0.0.1 (default 8786; 0: any free port)")
    q.add_argument("--loihi2", action="store_true",
                   help="the first worker also owns loihi2 (the Lava shim in .venv-lava)")
    q.add_argument("--no-host-power", action="store_true",
                   help="no worker owns host-power (points that read the host's power counters "
                        "then wait; use sweeps with power_source = \"none\")")
    q.add_argument("--logs", type=Path, default=None, metavar="DIR",
                   help="where the scheduler's and workers' logs go (default: a temp folder)")
    q.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from rig.cluster.local import local_resources, start_local

    if args.workers < 1:
        raise ConfigError(f"--workers {args.workers}: expected 1 or more")
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port {args.port}: expected 0..65535")
    logs = args.logs or Path(tempfile.mkdtemp(prefix="rig-cluster-"))
    resources = [local_resources(i, loihi2=args.loihi2, host_power=not args.no_host_power)
                 for i in range(args.workers)]
    # SIGTERM stops the cluster as Ctrl-C does (also while it starts): no process is left.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        cluster = start_local(args.workers, logs, port=args.port, resources=resources)
    except KeyboardInterrupt:
        return 130
    try:
        print(f"scheduler {cluster.address} (logs in {logs})", flush=True)
        for proc, owned in zip(cluster.workers, resources, strict=True):
            print(f"  worker {proc.name} (pid {proc.pid}): "
                  f"{', '.join(f'{k}={v}' for k, v in owned.items())}", flush=True)
        print(f"run: rig sweep qubo SWEEP.toml --cluster {cluster.address}   "
              "(Ctrl-C here stops the cluster)", flush=True)
        while True:
            for proc in [cluster.scheduler, *cluster.workers]:
                if proc.popen.poll() is not None:
                    raise ConfigError(f"{proc.name} exited ({proc.popen.returncode}):\n"
                                      f"{proc.tail()}", hint=f"see {proc.log}")
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the stop
        cluster.stop()
    print("cluster stopped", flush=True)
    return 0


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt
