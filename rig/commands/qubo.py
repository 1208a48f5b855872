"""`rig qubo generate|bks`: NeuroBench QUBO workloads and their target costs."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from rig.commands.common import print_json
from rig.qubo import workloads
from rig.qubo.targets import bks
from rig.qubo.workloads import MAX_DENSE_NODES, WorkloadError, dense_q, generate


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("qubo", help="QUBO (MIS) workloads and their target costs")
    actions = p.add_subparsers(dest="qubo_command", metavar="ACTION", required=True)

    gen = actions.add_parser(
        "generate", help="write one workload's QUBO to a file",
        description="Write the NeuroBench MIS QUBO of (nodes, density, seed): .npy is the dense "
        f"int8 Q (up to {MAX_DENSE_NODES} nodes), .npz the sparse graph (arrays edges (m, 2) "
        "int32 with i < j, nodes, density, seed).",
    )
    _add_workload_arguments(gen)
    gen.add_argument("--out", type=Path, required=True, metavar="FILE",
                     help="FILE.npy (dense Q) or FILE.npz (edges)")
    gen.add_argument("--json", action="store_true", help="print what was written as JSON")
    gen.set_defaults(run=run_generate)

    target = actions.add_parser(
        "bks", help="the workload's target (best-known) cost",
        description="The target cost: the official table's entry, else the exact optimum below "
        "50 nodes, else D-Wave tabu (100 reads, 50 restarts). With --json, \"state\" is the list "
        "of node indices in the best set (x_i = 1), ascending; null when the table gave the cost.",
    )
    _add_workload_arguments(target)
    target.add_argument("--no-table", action="store_true",
                        help="compute the target even when the official table has it")
    target.add_argument("--json", action="store_true",
                        help='print {"cost", "method", "state"} as JSON')
    target.set_defaults(run=run_bks)

    size = actions.add_parser(
        "max-size", help="the largest workload a system loads and solves better than cost 0",
        description="Try (n, density, seed) for n along the NeuroBench pattern (10, 25, 50, 100, "
        "250, ...) until a size fails to load or to beat the trivial cost 0. The spec asks for "
        "density 0.01 and 1.0 (fully connected), seed 0.",
    )
    size.add_argument("--sut", required=True, choices=["cpu-tabu", "cpu-sa", "loihi2"])
    size.add_argument("--density", type=float, required=True, help="0.01 or 1.0 for the spec")
    size.add_argument("--timeout", type=float, default=1.0, metavar="S",
                      help="solve time per size (default 1 s)")
    size.add_argument("--max-nodes", type=int, default=None, metavar="N",
                      help="stop after this size (default: the whole pattern)")
    size.add_argument("--seed", type=int, default=0, help="problem seed (spec: 0)")
    size.add_argument("--json", action="store_true", help="print the result as JSON")
    size.set_defaults(run=run_max_size)

    tune = actions.add_parser(
        "tune", help="search a SUT's hyperparameters on the tuning seeds 0-4",
        description="For each (nodes, density), score every candidate of the SUT's small grid by "
        "its mean BKS gap over the tuning seeds (0-4 only: rules.md) at a fixed timeout, and write "
        "a tuning file: parameters per (nodes, density), never per seed, with the search record. "
        "Sweeps use it with [sweep] tuning = \"FILE\" or `rig sweep qubo --tuning FILE` (nearest "
        "(nodes, density) entry).",
    )
    tune.add_argument("--sut", required=True, choices=["loihi2"])
    tune.add_argument("--nodes", required=True, type=_ints, help="e.g. 25,100")
    tune.add_argument("--densities", required=True, type=_floats, help="e.g. 0.05,0.1")
    tune.add_argument("--seeds", type=_ints, default=None, help="subset of 0,1,2,3,4 (default all)")
    tune.add_argument("--timeout", type=float, default=1.0, metavar="S",
                      help="solve time per point (default 1 s)")
    tune.add_argument("--out", type=Path, required=True, metavar="FILE", help="tuning.toml")
    tune.add_argument("--json", action="store_true", help="print the tuning as JSON")
    tune.set_defaults(run=run_tune)


def _ints(text: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers separated by commas: "
                                         f"{text!r}") from None


def _floats(text: str) -> list[float]:
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas: "
                                         f"{text!r}") from None


def _add_workload_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nodes", type=int, required=True, help="number of nodes (e.g. 100)")
    p.add_argument("--density", type=float, required=True,
                   help="edge density, a fraction (e.g. 0.05; 1.0 is a complete graph)")
    p.add_argument("--seed", type=int, required=True, help="problem seed (tuning: 0..4)")


def run_generate(args: argparse.Namespace) -> int:
    path: Path = args.out
    suffix = path.suffix.lower()
    if suffix not in (".npy", ".npz"):
        raise WorkloadError(f"{path}: unknown output format {suffix or '(no suffix)'!r}",
                            hint="end the file name in .npy (dense Q) or .npz (sparse edges)")
    if suffix == ".npy" and args.nodes > MAX_DENSE_NODES:  # before spending time on the graph
        raise WorkloadError(
            f"a dense Q of {args.nodes} nodes is too large for .npy",
            hint=f"dense .npy goes up to {MAX_DENSE_NODES} nodes; write FILE.npz (edges) instead",
        )
    workload = generate(args.nodes, args.density, args.seed)
    if not path.parent.is_dir():
        raise WorkloadError(f"{path}: folder {path.parent} does not exist",
                            hint="create it first or choose another --out")
    if suffix == ".npy":
        with path.open("wb") as f:
            np.save(f, dense_q(workload))
    else:
        workloads.save(workload, path)
    data = {"nodes": workload.nodes, "density": workload.density, "seed": workload.seed,
            "edges": workload.n_edges, "path": str(path)}
    if args.json:
        print_json(data)
    else:
        print(f"{workload.nodes} nodes, density {workload.density}, seed {workload.seed}: "
              f"{workload.n_edges} edges -> {path}")
    return 0


def run_bks(args: argparse.Namespace) -> int:
    target = bks(args.nodes, args.density, args.seed, use_table=not args.no_table)
    state = None if target.state is None else np.flatnonzero(target.state).tolist()
    if args.json:
        print_json({"cost": target.cost, "method": target.method, "state": state})
    else:
        size = "" if state is None else f", set of {len(state)} nodes"
        print(f"target cost {target.cost} ({target.method}{size})")
    return 0


def run_max_size(args: argparse.Namespace) -> int:
    from rig.qubo.procedure import max_workload_size
    from rig.qubo.suts import open_sut

    if not 0 < args.density <= 1:
        raise WorkloadError(f"--density must be in (0, 1], got {args.density}")
    sut = open_sut(args.sut)
    try:
        result = max_workload_size(sut, args.density, args.timeout, max_nodes=args.max_nodes,
                                   seed=args.seed)
    finally:
        sut.close()
    if args.json:
        print_json(result)
        return 0
    for row in result["tried"]:
        mark = "ok " if row["ok"] else "no "
        print(f"{mark} {row['nodes']:>7} nodes  cost {row['cost']}  {row['reason']}")
    print(f"largest: {result['max_nodes']} nodes at density {args.density:g} "
          f"({result['stopped_by']})")
    return 0


def run_tune(args: argparse.Namespace) -> int:
    from rig.qubo import tuning

    seeds = tuning.check_seeds(args.seeds if args.seeds is not None else tuning.TUNING_SEEDS)
    if any(n < 1 for n in args.nodes) or any(not 0 < d <= 1 for d in args.densities):
        raise WorkloadError("--nodes must be >= 1 and --densities in (0, 1]")
    if not args.out.parent.is_dir():
        raise WorkloadError(f"{args.out}: folder {args.out.parent} does not exist")
    measure, close = tuning.sut_measure(args.sut, args.timeout)
    try:
        content = tuning.search(args.sut, args.nodes, args.densities, measure, seeds=seeds,
                                timeout_s=args.timeout,
                                progress=None if args.json else print)
    finally:
        close()
    tuning.write_tuning(content, args.out)
    if args.json:
        print_json(content)
    else:
        for e in content["entry"]:
            print(f"{e['nodes']} nodes, density {e['density']:g}: {e['parameters']}")
        print(f"-> {args.out}")
    return 0
