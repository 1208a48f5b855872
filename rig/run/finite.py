"""Non-finite numbers (NaN, ±infinity) where the rig reads or writes a figure.

JSON has neither: Python's `json` module reads and writes them (`NaN`, `Infinity`) unless told
not to, and other readers refuse such a file. So a run folder that holds one was edited or
damaged, and is refused by name where it is read (`rig.run.store.load_run`, `read_manifest`);
the rig writes its manifests and a report's results.json through `finite_json`, which refuses
one naming the field instead of writing it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from numbers import Real
from typing import Any

import msgspec

from rig.errors import NonFiniteError

#: A JSON parser ~2-3x quicker than json's scanner on the rig's files, that refuses what JSON
#: refuses and NaN, Infinity and numbers past float range too (json reads those): where it
#: refuses a text, json reads it again (`NonFiniteWatch.loads`), which then says why or
#: notes the non-finite number. On every text it accepts it gives what json gives (integers
#: of any size, floats rounded alike, the last of duplicate keys): tests/rig/test_non_finite.py.
_QUICK = msgspec.json.Decoder()


def first_non_finite(value: Any, where: str = "") -> tuple[str, float] | None:
    """(path, number) of the first NaN or infinite number in `value` (dicts, lists, tuples,
    numbers; numpy scalars too), depth first, or None. The path is `key.key[index]`."""
    if isinstance(value, bool) or value is None or isinstance(value, str | int):
        return None
    if isinstance(value, Real):
        number = float(value)
        return None if math.isfinite(number) else (where, number)
    if isinstance(value, dict):
        for key, item in value.items():
            found = first_non_finite(item, f"{where}.{key}" if where else str(key))
            if found is not None:
                return found
    elif isinstance(value, list | tuple):
        for k, item in enumerate(value):
            found = first_non_finite(item, f"{where}[{k}]")
            if found is not None:
                return found
    return None


#: The whitespace JSON allows around a value (`json.decoder.WHITESPACE`).
_JSON_WHITESPACE = " \t\n\r"


class NonFiniteWatch:
    """JSON parsing (`loads`, as `json.loads` parses text) that notes in `seen` whether any
    number it read was NaN or infinite: json hands every float and every NaN / Infinity
    literal to the hooks below, so a text without one needs no `first_non_finite` walk over its
    values afterwards (that walk costs more than the parsing)."""

    def __init__(self) -> None:
        self.seen = False
        self._decoder = json.JSONDecoder(parse_float=self._float, parse_constant=self._constant)
        #: The decoder's value scanner: `loads` calls it directly on a text that is one value
        #: and nothing else (an events.jsonl line), as `JSONDecoder.decode` would, without its
        #: two whitespace matches and its Python frames per text.
        self._scan: Callable[[str, int], tuple[Any, int]] = (
            self._decoder.scan_once)  # type: ignore[attr-defined]

    def _float(self, text: str) -> float:
        number = float(text)  # what json makes of it by default
        if not math.isfinite(number):  # a literal past float range, e.g. 1e999
            self.seen = True
        return number

    def _constant(self, text: str) -> float:
        self.seen = True  # NaN, Infinity, -Infinity
        return float(text)

    def loads(self, text: str) -> Any:
        """`json.loads(text)` (JSONDecodeError alike)."""
        if text.startswith("\ufeff"):  # as json.loads refuses it
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        try:
            return _QUICK.decode(text)  # every number in it finite: `seen` stays as it is
        except (msgspec.DecodeError, RecursionError):
            pass  # not JSON, a NaN or infinity, a lone surrogate: json's scan tells which
        try:
            # What `decode` does when the value starts at 0 (no whitespace before it): the
            # same scan, the same hooks called on the same numbers.
            value, end = self._scan(text, 0)
        except (StopIteration, json.JSONDecodeError):
            pass  # whitespace first, or not JSON: `decode` says which, as json.loads would
        else:
            # Nothing after it but JSON's whitespace (a file's last newline): `decode`'s value.
            if end == len(text) or not text[end:].strip(_JSON_WHITESPACE):
                return value
        # Text after the value (`decode` raises "Extra data"), or whitespace before it: the
        # same value scanned again (the hooks see the same numbers: `seen` is unchanged), or
        # the same error.
        return self._decoder.decode(text)


def spelled(number: float) -> str:
    """How JSON readers that accept them spell a non-finite number: NaN, Infinity, -Infinity."""
    return json.dumps(number)


def finite_json(data: Any, name: str, **kwargs: Any) -> str:
    """`json.dumps(data, allow_nan=False, **kwargs)`; a NaN or infinity in `data` raises
    NonFiniteError naming `name` (the file) and the field instead."""
    try:
        return json.dumps(data, allow_nan=False, **kwargs)
    except ValueError:
        found = first_non_finite(data)
        if found is None:
            raise
        where, number = found
        raise NonFiniteError(
            f"cannot write {name}: {where or 'the value'} is {spelled(number)}, not a finite "
            "number (JSON has no NaN or Infinity)",
            hint="a figure came out NaN or infinite: see the run's events for the measurement "
                 "it comes from") from None
