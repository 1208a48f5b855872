"""A byte transport that garbles chosen DUT lines, once each, for tests of recovery."""

from __future__ import annotations

from typing import Any


class GarblingTransport:
    """Wraps a transport (a `SerialTransport` to a simulated DUT): the client gets the DUT's
    lines whole, and the `k`-th line (1-based) that starts with `prefix` reaches it as
    `garbled` instead, for each rule (prefix, k, garbled); `hits` lists what was replaced."""

    def __init__(self, inner: Any, rules: list[tuple[bytes, int, bytes]]) -> None:
        self._inner = inner
        self._rules = rules
        self._seen: dict[bytes, int] = {}
        self._held = bytearray()
        self.hits: list[tuple[bytes, bytes]] = []

    def read(self) -> bytes:
        self._held += self._inner.read()
        end = self._held.rfind(b"\n")
        if end < 0:
            return b""
        lines, self._held = bytes(self._held[: end + 1]), self._held[end + 1 :]
        out = bytearray()
        for line in lines.split(b"\n")[:-1]:
            line += b"\n"
            counted: set[bytes] = set()
            for prefix, k, garbled in self._rules:
                if not line.startswith(prefix):
                    continue
                if prefix not in counted:
                    counted.add(prefix)
                    self._seen[prefix] = self._seen.get(prefix, 0) + 1
                if self._seen[prefix] == k:
                    self.hits.append((line, garbled))
                    line = garbled
                    break
            out += line
        return bytes(out)

    def reset_input(self) -> None:
        self._held.clear()
        reset = getattr(self._inner, "reset_input", None)
        if reset is not None:
            reset()

    def write(self, data: bytes) -> None:
        self._inner.write(data)

    def close(self) -> None:
        self._inner.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
