"""The `rig` command line. Each subcommand lives in `rig.commands.<name>`; the GUI's commands
(`rig view`, `rig gui`) live in `gui/` and register themselves as entry points of the group
`neurobench_rig.commands`, so that `rig` never imports the layer above it.

Exit codes: 0 success, 2 bad input or setup, 1 a measurement that failed its own checks,
130 interrupted by the user.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from protocols.errors import ActionableError

#: Entry-point group of subcommands that other layers add (each names an `add_parser(sub)`).
PLUGIN_GROUP = "neurobench_rig.commands"
#: Subcommand modules under rig.commands, in the order `rig --help` lists them.
COMMANDS = ["devices", "dut", "sim", "emon", "measure", "analyze", "qubo", "sweep", "show",
            "compare", "report", "dataset", "model", "serve", "mqtt"]
#: The sweep cluster: `rig worker` per rig host, `rig cluster local` to try it (rig/cluster).
COMMANDS += ["worker", "cluster"]
#: The lab's rigs on a web page, from the broker (rig/dashboard).
COMMANDS += ["dashboard"]
#: A lab's own folder of benches, and where each bench `--device NAME` finds comes from.
COMMANDS += ["init", "benches"]
#: A submission anyone can verify: signing keys, sealed bundles, their verification.
COMMANDS += ["keys", "bundle", "verify"]


class _VersionAction(argparse.Action):
    """`rig --version`: the version is asked of git only here, not by every `rig` start."""

    def __call__(self, parser: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        from rig import rig_version

        print(f"neurobench-rig {rig_version()}")  # on stdout, as argparse's own action
        parser.exit()


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser with every subcommand registered, or only `command` where it names
    one of ours: each subcommand's module imports what its work needs, and the test suite starts
    hundreds of `rig` processes that each run one subcommand."""
    parser = argparse.ArgumentParser(
        prog="rig", description="NeuroBench system-track bench: measure, analyse, report."
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument("--version", action=_VersionAction, nargs=0,
                        help="show the rig's version (its git commit) and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    if command in COMMANDS:
        importlib.import_module(f"rig.commands.{command}").add_parser(sub)
        return parser
    for name in COMMANDS:
        module = importlib.import_module(f"rig.commands.{name}")
        module.add_parser(sub)
    from importlib import metadata  # ~50 ms to import: only the whole parser needs plugins

    for entry in sorted(metadata.entry_points(group=PLUGIN_GROUP), key=lambda e: e.name):
        try:
            add_parser = entry.load()
        except ImportError:  # a broken optional part must not take the whole CLI down
            continue
        add_parser(sub)
    return parser


def command_named(argv: list[str]) -> str | None:
    """The subcommand `argv` names: its first word that is not an option (the top level's
    options, --debug and --version, take no value)."""
    return next((a for a in argv if not a.startswith("-")), None)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `rig` console script."""
    # Before numpy is imported (rig.cli imports none of it): OpenBLAS starts a thread per core
    # that spins ~0.1 s of CPU each before it sleeps, in every `rig` and every process it
    # starts. rig's per-sample work is element-wise, never BLAS. A value set by the user wins.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(command_named(argv))
    args = parser.parse_args(argv)
    try:
        code = int(args.run(args) or 0)
        sys.stdout.flush()  # here, so a reader that went away is caught below
        return code
    except BrokenPipeError:
        # `rig show --json | head`: the reader has what it wanted; not an error of ours.
        # Point stdout at /dev/null so the interpreter's last flush cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except ActionableError as exc:  # the one place: rig, drivers, protocols, firmware's Xylo tools
        if args.debug:
            raise
        # One line: what went wrong, and in brackets what to do about it.
        print(f"rig: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        if args.debug:
            raise
        print("rig: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
