"""Write a `Bench` back to a TOML bench file (the runner GUI's "Save bench").

Every key is written, defaults included, so that the file documents the whole bench. The text
is checked by loading it back with `parse_bench` before anything is written: a bench the rig
would refuse (a supply voltage above its limit, say) is never saved, and what is saved loads
back to the same bench.
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
import tomllib
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from rig import __version__
from rig.bench.config import Bench, normalize_current_range, parse_bench
from rig.errors import ConfigError

#: Mode of a newly created bench file (an overwritten one keeps its own).
FILE_MODE = 0o644

_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f",
            "\r": "\\r"}


def bench_to_toml(bench: Bench, *, path: str | Path | None = None) -> str:
    """The TOML text of `bench`.

    `path` is where the text will be saved: a Xylo's ``[dut] spec`` (an absolute path once
    loaded) is then written relative to that file's folder when the two share more than the
    filesystem root; without `path` it stays absolute. Raises `ConfigError` (or
    `VoltageLimitError`) if the text would not load back as `bench`.
    """
    target = Path(path) if path is not None else bench.path
    with contextlib.suppress(ConfigError):  # a range the driver refuses is reported below
        # "18mA" typed into a form is the Joulescope's "18 mA": written as the rig reads it.
        bench = replace(bench, emon=replace(bench.emon, current_range=normalize_current_range(
            bench.emon.driver, bench.emon.current_range)))
    dut = bench.dut
    if dut.spec and path is not None:
        dut = replace(dut, spec=_relative(dut.spec, target.parent))
    lines = [
        f"# Bench file written by neurobench-rig {__version__}: every setting is listed, "
        "defaults included.",
        "",
        "[bench]",
        _pair("name", bench.name),
    ]
    if not bench.worker_only or bench.voltage_limit_v:  # a worker file may leave it out (0 V)
        lines.append(_pair("voltage_limit_v", bench.voltage_limit_v))
    lines.append(_pair("simulated", bench.simulated))
    tables: list[tuple[str, Any]] = [] if bench.worker_only else [
        ("dut", dut), ("emon", bench.emon), ("dataset", bench.dataset),
        ("procedure.asc", bench.asc)]
    if bench.sim is not None:
        tables.append(("sim", bench.sim))
    if bench.io_manager is not None:
        tables.append(("io_manager", bench.io_manager))
    if bench.mqtt is not None:
        tables.append(("mqtt", bench.mqtt))
    if bench.qemu is not None:  # its image path is absolute once loaded: kept so
        tables.append(("qemu", bench.qemu))
    for name, table in tables:
        lines += ["", f"[{name}]"]
        for f in fields(table):
            value = getattr(table, f.name)
            if value is None:  # TOML has no null; "" reads back as "not set" too
                value = ""
            lines.append(_pair(f.name, value))
        if name == "emon" and bench.emon_accuracy is not None:  # only the figures given
            lab = bench.emon_accuracy
            lines += ["", "[emon.accuracy]", _pair("source", lab.source)]
            lines += [_pair(key, getattr(lab, key)) for key in lab.given()]
    if bench.worker is not None:
        resources = ", ".join(f"{name} = {count}" for name, count in bench.worker.resources.items())
        lines += ["", "[worker]", f"resources = {{ {resources} }}"]
        if bench.worker.name:
            lines.append(_pair("name", bench.worker.name))
    text = "\n".join(lines) + "\n"
    _check_round_trip(bench, text, target)
    return text


def save_bench(bench: Bench, path: str | Path, *, overwrite: bool = False) -> Path:
    """Write `bench` to `path` atomically (a temporary file in the same folder, then
    `os.replace`); refuse to overwrite an existing file unless `overwrite`. Returns the path."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise ConfigError(f"{path} already exists",
                          hint="choose another file name, or allow overwriting it")
    if not path.parent.is_dir():
        raise ConfigError(f"{path}: folder {path.parent} does not exist",
                          hint="create the folder first, or save somewhere else")
    text = bench_to_toml(bench, path=path)
    mode = path.stat().st_mode & 0o7777 if path.exists() else FILE_MODE
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise ConfigError(f"{path}: cannot write the bench file: {exc}",
                          hint="check the folder's permissions and free space") from exc
    return path


# -- TOML values ----------------------------------------------------------------------------------
def _pair(key: str, value: Any) -> str:
    return f"{key} = {_value(value)}"


def _value(value: Any) -> str:
    """One TOML value: string, bool, int or float (floats written to round-trip exactly)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)  # the shortest text that reads back as the same double
    if isinstance(value, str):
        return _string(value)
    raise TypeError(f"cannot write {type(value).__name__} {value!r} as a TOML value")


def _string(text: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped."""
    out = []
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        elif 0xD800 <= ord(ch) <= 0xDFFF:
            raise ConfigError(f"cannot write {text!r}: it holds a lone surrogate "
                              f"(U+{ord(ch):04X}), which is not text")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _relative(spec: str, folder: Path) -> str:
    """`spec` relative to `folder` when both are absolute and share more than the root."""
    spec_path = Path(spec)
    if not spec_path.is_absolute():
        return spec
    base = folder.resolve()
    try:
        common = Path(os.path.commonpath([spec_path, base]))
    except ValueError:  # different drives
        return spec
    if common == Path(common.anchor):
        return spec
    return Path(os.path.relpath(spec_path, base)).as_posix()


def _check_round_trip(bench: Bench, text: str, target: Path) -> None:
    """Load `text` as the rig will; it must give `bench` back."""
    loaded = parse_bench(tomllib.loads(text), target)
    if replace(loaded, path=bench.path) != bench:
        differ = [f.name for f in fields(bench)
                  if f.name != "path" and getattr(loaded, f.name) != getattr(bench, f.name)]
        raise ConfigError(
            f"{target}: the bench cannot be written faithfully ({', '.join(differ)} would "
            "read back differently)",
            hint="set the value in a bench file by hand",
        )
