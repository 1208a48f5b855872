"""Each layer has its own error base on the shared `ActionableError` shape (message, hint, exit
code), none subclasses a rig class, `BENCH_ERRORS` covers every error the bench raises on purpose,
and the CLI maps each of them to its exit code in one place."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from types import ModuleType

import pytest

import drivers
import drivers.errors
import protocols
import protocols.errors
import rig
from drivers.errors import DeviceError, PortError, VoltageLimitError
from protocols.errors import ActionableError, ProtocolError
from rig import cli
from rig.errors import BENCH_ERRORS, ConfigError, MeasurementFailed, RigError, RunInterrupted

LAYERS = ("protocols", "drivers", "rig")


def all_modules(package: ModuleType) -> list[str]:
    """Every module of `package` that imports here (an optional SDK missing skips its module)."""
    names = []
    for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
        if info.name.endswith(".__main__"):  # runs a program when imported
            continue
        try:
            importlib.import_module(info.name)
        except ImportError:
            continue
        names.append(info.name)
    return names


def subclasses(cls: type) -> set[type]:
    found = set(cls.__subclasses__())
    for sub in list(found):
        found |= subclasses(sub)
    return found


def test_lower_layers_have_their_own_bases() -> None:
    assert not hasattr(protocols.errors, "RigError")
    assert not hasattr(drivers.errors, "RigError")
    for module in (protocols.errors, drivers.errors):
        for cls in vars(module).values():
            if isinstance(cls, type) and issubclass(cls, Exception):
                rig_bases = [b for b in cls.__mro__ if b.__module__.split(".")[0] == "rig"]
                assert rig_bases == [], f"{cls.__name__} subclasses {rig_bases}"
    assert RigError.__module__ == "rig.errors"


def test_bench_errors_cover_every_error_of_the_bench() -> None:
    for package in (protocols, drivers, rig):
        all_modules(package)
    ours = [c for c in subclasses(ActionableError) if c.__module__.split(".")[0] in LAYERS]
    assert len(ours) > 20, "the walk found the bench's errors"
    missed = sorted(f"{c.__module__}.{c.__qualname__}" for c in ours
                    if not issubclass(c, BENCH_ERRORS))
    assert missed == []


@pytest.mark.parametrize(("error", "code"), [
    (ProtocolError("bad frame", hint="check the baud rate"), 2),
    (DeviceError("no answer", hint="power the board"), 2),
    (PortError("busy", hint="close the other program"), 2),
    (VoltageLimitError("3.6 V is above the 3.3 V limit", hint="lower the supply"), 2),
    (ConfigError("bench.toml: [dut] port missing", hint="add it"), 2),
    (MeasurementFailed("accuracy 0.1 is below 0.5", hint="check the model"), 1),
    (RunInterrupted("run interrupted", hint="its folder is kept"), 130),
])
def test_cli_maps_every_layer_to_its_exit_code(error: ActionableError, code: int,
                                               monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    def parser(command: str | None = None) -> argparse.ArgumentParser:
        def run(args: argparse.Namespace) -> int:
            raise error
        p = argparse.ArgumentParser(prog="rig")
        p.add_argument("--debug", action="store_true")
        p.set_defaults(run=run)
        return p

    monkeypatch.setattr(cli, "build_parser", parser)
    assert cli.main([]) == code
    assert capsys.readouterr().err == f"rig: error: {error.message} ({error.hint})\n"


def test_cli_maps_the_firmware_tools_errors(monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """`rig model` uses firmware/xylo (not a rig module, so its errors are no RigError)."""
    sys.path.append(str(cli.__file__).rsplit("/rig/", 1)[0])
    from firmware.xylo.spec import SpecError

    def parser(command: str | None = None) -> argparse.ArgumentParser:
        def run(args: argparse.Namespace) -> int:
            raise SpecError("spec.npz: checksum mismatch", hint="write it again")
        p = argparse.ArgumentParser(prog="rig")
        p.add_argument("--debug", action="store_true")
        p.set_defaults(run=run)
        return p

    monkeypatch.setattr(cli, "build_parser", parser)
    assert cli.main([]) == 2
    assert capsys.readouterr().err == "rig: error: spec.npz: checksum mismatch (write it again)\n"
