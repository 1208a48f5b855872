"""What a NIR graph file holds, read with the `nir` package alone (no firmware, no Rockpool):
for `rig model info` and the report. The shim's own reader (mapping and quantising for Xylo) is
firmware/xylo/nir_graph.py."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rig.errors import ConfigError

#: What `rig model export --format` writes.
FORMATS = ("nir",)
#: Every HDF5 file (so every NIR file) starts with these bytes.
HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"


def is_nir_file(path: str | Path) -> bool:
    """True if `path` starts like an HDF5 file (a NIR graph), whatever its name."""
    try:
        with open(path, "rb") as f:
            return f.read(len(HDF5_MAGIC)) == HDF5_MAGIC
    except OSError:
        return False


@dataclass(frozen=True)
class NirSummary:
    """A NIR graph's metadata (as `rig model export` writes it) and sizes."""

    metadata: dict[str, Any]
    #: The graph's own inputs (not those of nested graphs), in neurons.
    inputs: list[int]
    #: The graph's own outputs, in neurons.
    outputs: list[int]
    #: (dotted node name, neurons) of every CubaLIF, nested graphs included.
    layers: list[tuple[str, int]]
    weights_nonzero: int
    weights_total: int
    nodes: int
    class_names: list[str] = field(default_factory=list)
    training: Any = None

    @property
    def dt(self) -> float | None:
        return float(self.metadata["dt"]) if "dt" in self.metadata else None


def read_nir_summary(path: Path) -> NirSummary:
    """The summary of the NIR graph at `path`; ConfigError if it cannot be read."""
    try:
        import nir
    except ImportError as exc:
        raise ConfigError("reading a NIR graph needs the nir package",
                          hint="install the rig's xylo extra") from exc
    try:
        graph = nir.read(path)
    except Exception as exc:  # nir / h5py raise many types for a damaged file
        raise ConfigError(f"{path} is not a readable NIR graph ({exc})",
                          hint="give a file written by `rig model export --format nir`") from exc
    nodes: list[tuple[str, Any]] = []
    pending = [("", graph)]
    while pending:  # every node, nested graphs included
        prefix, g = pending.pop()
        for name, node in g.nodes.items():
            if isinstance(node, nir.NIRGraph):
                pending.append((f"{prefix}{name}.", node))
            else:
                nodes.append((prefix + name, node))
    own = [(name, n) for name, n in nodes if "." not in name]  # the graph's own ports
    weights = [np.asarray(n.weight) for _, n in nodes if isinstance(n, (nir.Linear, nir.Affine))]
    meta = dict(graph.metadata or {})
    decoded: dict[str, Any] = {}
    for key, default in (("class_names", []), ("training", None)):
        try:
            decoded[key] = json.loads(meta[key]) if key in meta else default
        except (TypeError, ValueError):
            decoded[key] = default
    return NirSummary(
        metadata=meta,
        inputs=[int(np.prod(n.input_type["input"])) for _, n in own if isinstance(n, nir.Input)],
        outputs=[int(np.prod(n.output_type["output"])) for _, n in own
                 if isinstance(n, nir.Output)],
        layers=[(name, int(np.size(n.v_threshold))) for name, n in sorted(nodes)
                if isinstance(n, nir.CubaLIF)],
        weights_nonzero=sum(int(np.count_nonzero(w)) for w in weights),
        weights_total=sum(int(w.size) for w in weights),
        nodes=len(nodes),
        class_names=list(decoded["class_names"] or []),
        training=decoded["training"],
    )
