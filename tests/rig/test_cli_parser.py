"""`rig COMMAND` registers only that subcommand's parser (its module imports what the work
needs); anything else (`rig --help`, a typo, a plugin's command) gets every subcommand."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest

from rig import cli
from tests.e2e.runs import REPO


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


@pytest.mark.parametrize(("argv", "named"), [
    (["measure", "asc", "--device", "sim"], "measure"),
    (["--debug", "show", "runs/x"], "show"),
    (["--version"], None),
    ([], None),
])
def test_the_command_is_the_first_word_that_is_not_an_option(argv: list[str],
                                                             named: str | None) -> None:
    assert cli.command_named(argv) == named


def test_one_command_gets_its_own_parser_the_same_as_in_the_full_one() -> None:
    full = subcommands(cli.build_parser())
    assert set(cli.COMMANDS) | {"view", "gui"} <= set(full)
    for name in cli.COMMANDS:
        only = subcommands(cli.build_parser(name))
        assert list(only) == [name]
        assert only[name].format_help() == full[name].format_help()


def test_a_name_that_is_no_command_of_ours_gets_every_command() -> None:
    assert set(subcommands(cli.build_parser("view"))) == set(subcommands(cli.build_parser()))
    assert set(subcommands(cli.build_parser("measur"))) == set(subcommands(cli.build_parser()))


def commands_imported(code: str) -> list[str]:
    """The rig.commands modules a fresh interpreter has imported after running `code`."""
    listing = "print(json.dumps(sorted(m for m in sys.modules if m.startswith('rig.commands.'))))"
    out = subprocess.run([sys.executable, "-c", f"import json, sys\n{code}\n{listing}"],
                         cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_rig_show_imports_what_show_imports_and_no_other_command() -> None:
    run = commands_imported("from rig import cli\ntry:\n    cli.main(['show', '--help'])\n"
                            "except SystemExit as e:\n    assert e.code == 0, e.code")
    assert run == commands_imported("import rig.commands.show")
    assert "rig.commands.show" in run and "rig.commands.measure" not in run
    assert len(run) < len(cli.COMMANDS)


def test_a_typo_lists_every_command() -> None:
    out = subprocess.run([sys.executable, "-m", "rig.cli", "measur"], cwd=REPO,
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 2
    assert "invalid choice: 'measur'" in out.stderr
    for name in [*cli.COMMANDS, "view", "gui"]:
        assert name in out.stderr


def run_rig_in(code: str, env: dict[str, str]) -> dict:
    """Run `rig show --help` through cli.main in a fresh interpreter, then `code`; its JSON."""
    script = ("import json, os, sys\nfrom rig import cli\ntry:\n    cli.main(['show', '--help'])\n"
              "except SystemExit as e:\n    assert e.code == 0, e.code\n" + code)
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=120, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def test_reading_a_run_does_not_import_what_only_writing_or_mqtt_needs() -> None:
    loaded = run_rig_in("print(json.dumps(sorted(sys.modules)))", dict(os.environ))
    for costly in ("pyarrow", "asyncio", "importlib.metadata", "aiomqtt"):
        assert costly not in loaded, costly


@pytest.mark.parametrize(("given", "threads"), [(None, 1), ("2", 2)])
def test_numpy_in_rig_starts_no_blas_threads_unless_asked(given: str | None, threads: int) -> None:
    """OpenBLAS's threads (one per extra core, each spinning ~0.1 s of CPU) are off in `rig`
    and what it starts; a value the user set is kept."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if given is not None:
        env["OPENBLAS_NUM_THREADS"] = given
    seen = run_rig_in("import numpy\nprint(json.dumps({'env': os.environ['OPENBLAS_NUM_THREADS'],"
                      " 'threads': len(os.listdir('/proc/self/task'))}))", env)
    assert seen == {"env": given or "1", "threads": threads}
