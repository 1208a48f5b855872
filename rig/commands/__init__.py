"""One module per `rig` subcommand: each has `add_parser(subparsers)` and `run(args) -> int`."""
