"""`rig model export --format nir`: a trained Xylo spec file written as a NIR graph.

The graph is written with ``nir.write`` (HDF5) by the firmware's own `firmware/xylo/nir_graph.py`
(the code the shim reads it back with), then checked: read back with ``nir.read``, mapped and
quantised for Xylo Audio 2 as the shim does, and compared array by array with the spec it came
from. A spec whose weight shifts are not zero maps back to other (rescaled) integers; the check
says which arrays differ rather than hide it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rig.errors import ConfigError
from rig.model.xylo import firmware_xylo

if TYPE_CHECKING:
    from firmware.xylo.spec import XyloSpec


@dataclass(frozen=True)
class Exported:
    """What `export_nir` wrote and what the read-back check found (`checked` False: skipped)."""

    path: Path
    spec: XyloSpec
    nodes: dict[str, str]
    checked: bool
    differences: list[str] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        """The graph maps back to exactly the spec's integers (only meaningful if checked)."""
        return self.checked and not self.differences

    def record(self) -> dict[str, Any]:
        """A JSON-able summary."""
        s = self.spec
        return {"file": str(self.path), "format": "nir", "model_id": s.model_id,
                "shape": [s.n_input, s.n_hidden, s.n_output], "dt": s.dt,
                "nodes": self.nodes, "checked": self.checked,
                "identical": self.identical if self.checked else None,
                "differences": self.differences}


def export_nir(model: Path, out: Path, check: bool = True) -> Exported:
    """Write the spec file `model` as a NIR graph at `out`; with `check`, read it back as the
    shim does and compare it with the spec."""
    fw = firmware_xylo()
    nir_graph = fw.nir_graph
    if nir_graph.is_nir_file(model):
        raise ConfigError(f"{model} is already a NIR graph",
                          hint="export a spec file (.npz) from `rig model train xylo`")
    spec = fw.spec.load_spec(model)
    if out.resolve() == model.resolve():
        raise ConfigError(f"-o {out} would overwrite the model file", hint="name another file")
    out.parent.mkdir(parents=True, exist_ok=True)
    graph = nir_graph.spec_to_nir(spec)  # refuses what NIR cannot say before writing a file
    nodes = {name: type(node).__name__ for name, node in graph.nodes.items()}
    path = nir_graph.write_nir(spec, out)
    if not check:
        return Exported(path, spec, nodes, checked=False)
    back = nir_graph.read_nir(path)  # the shim's own way in
    differences = [name for name in spec.arrays
                   if spec.arrays[name].shape != back.arrays[name].shape
                   or not np.array_equal(spec.arrays[name], back.arrays[name])]
    differences += [what for what, a, b in (("dt", spec.dt, back.dt),
                                            ("class_names", spec.class_names, back.class_names),
                                            ("model_id", spec.model_id, back.model_id))
                    if a != b]
    return Exported(path, spec, nodes, checked=True, differences=differences)
