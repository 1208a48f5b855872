"""`rig model train xylo|c-shim`, `rig model export`, `rig model info`: train the models the DUTs
run, write a Xylo model as a NIR graph, and say how a model file was trained.

`train xylo` writes the Xylo shim's spec file (default: the shipped
firmware/xylo/models/asc_synthetic.npz), its settings chosen on a validation split of the train
data; `train c-shim` writes the C shim's weights (firmware/dut/asc_model_weights.npz and
firmware/dut/core/asc_model_weights.h). The defaults reproduce the shipped models.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from rig.commands.common import print_json
from rig.errors import ConfigError
from rig.model.nir_file import FORMATS, is_nir_file, read_nir_summary

#: Xylo Audio 2 has at most 1000 hidden neurons.
_MAX_HIDDEN = 1000


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("model", help="train the models the DUTs run; show how a model was trained")
    actions = p.add_subparsers(dest="model_command", metavar="ACTION", required=True)
    train = actions.add_parser("train", help="train a DUT's ASC model and write its files")
    targets = train.add_subparsers(dest="target", metavar="TARGET", required=True)

    x = targets.add_parser(
        "xylo", help="the Xylo Audio 2 network (firmware/xylo), settings chosen on validation",
        description="Train the Xylo Audio 2 ASC network and write its spec file. Hidden size "
        "and ridge are chosen on a validation split of the TRAIN data (seeded, stratified by "
        "scene, whole clips); the test split is read only after the file is written, to "
        "report its accuracy. The defaults make the shipped model.")
    x.add_argument("--out", type=Path, metavar="FILE",
                   help="spec file to write (default: the shipped "
                   "firmware/xylo/models/asc_synthetic.npz; required with --dataset)")
    x.add_argument("--dataset", type=Path, metavar="DIR",
                   help="a DCASE 2020-layout folder to train on (default: the SYNTHETIC set, "
                   "made under --work-dir)")
    x.add_argument("--train-clips", type=int, default=16, metavar="N",
                   help="synthetic set: 10 s train clips per scene (default 16)")
    x.add_argument("--test-clips", type=int, default=4, metavar="N",
                   help="synthetic set: 10 s test clips per scene (default 4)")
    x.add_argument("--data-seed", type=int, default=1,
                   help="synthetic set seed (default 1; the rig's own test set uses seed 0)")
    x.add_argument("--work-dir", type=Path, metavar="DIR",
                   help="synthetic data and AFE cache (default: the rig's cache folder, "
                   "$RIG_CACHE or ~/.cache/neurobench-rig, subfolder xylo-train)")
    x.add_argument("--seed", type=int, default=0, help="network initialisation seed (default 0)")
    x.add_argument("--hidden", type=_ints, metavar="N,N,...",
                   help="hidden sizes to choose from (default 128,256,512,1000; at most 1000)")
    x.add_argument("--ridge", type=_floats, metavar="R,R,...",
                   help="ridge strengths to choose from (default 0.001,0.01,0.1,1)")
    x.add_argument("--val-fraction", type=float, default=None, metavar="F",
                   help="share of each scene's train clips held out for validation "
                   "(default 0.25)")
    x.add_argument("--val-seed", type=int, default=None, help="validation split seed (default 0)")
    x.add_argument("--model-id", metavar="ID",
                   help="model id the shim reports (default xylo-asc-synth01, with --dataset "
                   "xylo-asc01)")
    x.add_argument("--workers", type=int, default=2, metavar="N",
                   help="AFE simulation processes (default 2)")
    x.add_argument("--no-test", action="store_true",
                   help="do not read the test split at all (no test accuracy)")
    x.add_argument("--json", action="store_true", help="print the outcome as one JSON object")
    x.set_defaults(run=run_train_xylo)

    c = targets.add_parser(
        "c-shim", help="the C shim's asc01 model (firmware/dut) and its Python reference",
        description="Train the C shim's linear ASC model on the synthetic train stream and "
        "write firmware/dut/asc_model_weights.npz and firmware/dut/core/asc_model_weights.h "
        "(or both into --out-dir). Deterministic; the defaults make the shipped files.")
    c.add_argument("--out-dir", type=Path, metavar="DIR",
                   help="write both files here instead of over the shipped ones")
    c.add_argument("--samples-per-class", type=int, default=200, metavar="N",
                   help="one-second train scenes per class (default 200)")
    c.add_argument("--seed", type=int, default=0, help="synthetic stream seed (default 0)")
    c.add_argument("--test-per-class", type=int, default=10, metavar="N",
                   help="test scenes per class for the accuracy printed afterwards (default "
                   "10; 0 reads no test data)")
    c.add_argument("--json", action="store_true", help="print the outcome as one JSON object")
    c.set_defaults(run=run_train_c_shim)

    e = actions.add_parser(
        "export", help="write a trained Xylo spec file in a portable format (NIR)",
        description="Write a Xylo spec file (from `rig model train xylo`) as a NIR graph "
        "(HDF5, nir.write): Input -> Linear -> recurrent CubaLIF -> Linear -> CubaLIF -> Output "
        "with dt, model id and class names in its metadata. The file is then read back with "
        "nir.read, mapped and quantised for Xylo Audio 2 as the shim does, and compared with "
        "the spec. The shim (and a bench's [dut] spec) takes the .nir file as it is.")
    e.add_argument("model", type=Path, metavar="MODEL", help="a Xylo network spec (.npz)")
    e.add_argument("--format", choices=FORMATS, default="nir",
                   help="output format (nir, the default and only one)")
    e.add_argument("-o", "--out", type=Path, metavar="FILE",
                   help="file to write (default: MODEL with the suffix .nir)")
    e.add_argument("--no-check", action="store_true",
                   help="skip reading the graph back through the Xylo mapper")
    e.add_argument("--json", action="store_true", help="print the outcome as one JSON object")
    e.set_defaults(run=run_export)

    i = actions.add_parser("info", help="a Xylo spec file's model and how it was trained")
    i.add_argument("file", type=Path, metavar="FILE",
                   help="a Xylo network spec (.npz) or a NIR graph from `rig model export`")
    i.add_argument("--json", action="store_true", help="print the header as one JSON object")
    i.set_defaults(run=run_info)


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a list of integers (e.g. 256,512)") from None
    if not values or any(not 1 <= v <= _MAX_HIDDEN for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: hidden sizes are 1 to {_MAX_HIDDEN}")
    return values


def _floats(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a list of numbers (e.g. 0.01,0.1)") from None
    if not values or any(not v > 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: ridge strengths must be positive")
    return values


def run_train_xylo(args: argparse.Namespace) -> int:
    from rig.datasets.testsets import cache_root
    from rig.model import xylo  # Rockpool, jax and scipy only for this command

    if args.dataset is not None and args.out is None:
        raise ConfigError("--dataset needs --out",
                          hint=f"the default {xylo.SHIPPED_SPEC.name} is the shipped SYNTHETIC "
                          "model; name the file to write")
    for name in ("train_clips", "test_clips", "workers"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 1, not "
                              f"{getattr(args, name)}")
    work_dir = args.work_dir or cache_root() / "xylo-train"
    if args.dataset is None:
        source = xylo.synthetic_source(work_dir, args.train_clips, args.test_clips,
                                       args.data_seed, args.workers)
        model_id = args.model_id or xylo.MODEL_ID
    else:
        if not args.dataset.is_dir():
            raise ConfigError(f"--dataset {args.dataset} is not a folder",
                              hint="the TAU Urban Acoustic Scenes 2020 Mobile folder (with "
                              "evaluation_setup/ and audio/)")
        source = xylo.DcaseRasters(args.dataset, work_dir / "afe", xylo.RATE_HZ, args.workers)
        model_id = args.model_id or "xylo-asc01"
    defaults = xylo.TrainConfig()
    config = xylo.TrainConfig(
        hidden_sizes=args.hidden or defaults.hidden_sizes,
        ridges=args.ridge or defaults.ridges,
        seed=args.seed,
        val_fraction=defaults.val_fraction if args.val_fraction is None else args.val_fraction,
        val_seed=defaults.val_seed if args.val_seed is None else args.val_seed,
        model_id=model_id,
    )
    out = Console(stderr=args.json)
    t0 = time.perf_counter()
    outcome = xylo.train_and_save(source, args.out or xylo.SHIPPED_SPEC, config,
                                  evaluate_test=not args.no_test,
                                  log=lambda line: out.print(line, soft_wrap=True,
                                                             highlight=False))
    wall = time.perf_counter() - t0
    t = outcome.trained
    if args.json:
        print_json({"file": str(outcome.path), "model_id": t.spec.model_id,
                    "training": t.spec.training, "test_accuracy": outcome.test_accuracy,
                    "test_slices": outcome.test_slices, "seconds": {**t.seconds, "wall": wall}})
        return 0
    spec = t.spec
    out.print(f"network {spec.n_input}-{spec.n_hidden}-{spec.n_output}, dt {spec.dt} s; data "
              f"{t.seconds['data']:.1f} s, selection {t.seconds['selection']:.1f} s, final fit "
              f"{t.seconds['fit']:.1f} s", soft_wrap=True)
    test = ("not read (--no-test)" if outcome.test_accuracy is None
            else f"{outcome.test_accuracy:.3f} ({outcome.test_slices} slices, read after the "
            "file was written)")
    out.print(f"XyloSim accuracy on the quantised spec: train {t.train_accuracy:.3f}, "
              f"validation {t.chosen.validation_accuracy:.3f}, test {test}; chance "
              f"{1 / len(spec.class_names):.2f}", soft_wrap=True)
    out.print(f"wall time {wall:.1f} s; wrote {outcome.path}", soft_wrap=True)
    return 0


def run_train_c_shim(args: argparse.Namespace) -> int:
    from rig.model import c_shim

    if args.samples_per_class < 1 or args.test_per_class < 0:
        raise ConfigError("--samples-per-class must be at least 1 and --test-per-class at "
                          f"least 0, not {args.samples_per_class} and {args.test_per_class}")
    w = c_shim.train_and_write(args.out_dir, args.samples_per_class, args.seed,
                               args.test_per_class)
    if args.json:
        print_json({"npz": str(w.npz), "header": str(w.header), "model_id": w.model.model_id,
                    "train_accuracy": w.train_accuracy, "test_accuracy": w.test_accuracy})
        return 0
    out = Console()
    out.print(f"wrote {w.npz} and {w.header}", soft_wrap=True)
    out.print(f"train accuracy {w.train_accuracy:.4f} ({args.samples_per_class} per class)")
    if w.test_accuracy is not None:
        out.print(f"test accuracy {w.test_accuracy:.4f} ({args.test_per_class} per class, "
                  f"seed {args.seed})")
    return 0


def run_export(args: argparse.Namespace) -> int:
    if not args.model.is_file():
        raise ConfigError(f"{args.model} does not exist",
                          hint="give a spec file written by `rig model train xylo`")
    from rig.model.nir_export import export_nir  # Rockpool, jax and nir only for this command

    done = export_nir(args.model, args.out or args.model.with_suffix(".nir"),
                      check=not args.no_check)
    if args.json:
        print_json(done.record())
        return 0
    out = Console()
    s = done.spec
    out.print(f"wrote {done.path}: NIR graph of {s.model_id}, {s.n_input}-{s.n_hidden}-"
              f"{s.n_output}, dt {s.dt} s; nodes "
              f"{', '.join(f'{k} ({v})' for k, v in done.nodes.items())}", soft_wrap=True)
    if not done.checked:
        out.print("not read back (--no-check)")
    elif done.identical:
        out.print("read back with nir.read and mapped for Xylo Audio 2: identical to the spec "
                  "(every array, dt, classes, model id)", soft_wrap=True)
    else:
        out.print(f"read back and mapped for Xylo Audio 2: differs from the spec in "
                  f"{', '.join(done.differences)} (weight shifts are folded into the weights "
                  "and re-quantised)", soft_wrap=True)
    return 0


def read_header(path: Path) -> dict[str, Any]:
    """The JSON header of a Xylo spec file (read with numpy, without the firmware's code), or
    the same fields from a NIR graph's metadata and nodes."""
    if is_nir_file(path):
        return _nir_header(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            header = json.loads(bytes(z["header"]).decode("utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"{path} does not exist") from exc
    except (OSError, KeyError, ValueError) as exc:
        raise ConfigError(f"{path} is not a Xylo network spec file ({exc})",
                          hint="give a file written by `rig model train xylo`") from exc
    if not isinstance(header, dict):
        raise ConfigError(f"{path}: the header is not a JSON object",
                          hint="give a file written by `rig model train xylo`")
    return header


def _nir_header(path: Path) -> dict[str, Any]:
    """A spec-like header from a NIR graph: its metadata and sizes (`read_nir_summary`)."""
    g = read_nir_summary(path)
    n_output = sum(g.outputs)
    return {"format": g.metadata.get("format", "NIR graph"),
            "model_id": g.metadata.get("model_id"),
            "device": g.metadata.get("device", "any (NIR)"), "n_input": sum(g.inputs),
            "n_hidden": sum(n for _, n in g.layers) - n_output, "n_output": n_output,
            "dt": g.dt, "class_names": g.class_names, "training": g.training}


def run_info(args: argparse.Namespace) -> int:
    header = read_header(args.file)
    if args.json:
        print_json(header)
        return 0
    out = Console()
    out.print(f"[bold]{args.file}[/]: model [bold]{header.get('model_id')}[/] for "
              f"{header.get('device')}, {header.get('n_input')}-{header.get('n_hidden')}-"
              f"{header.get('n_output')}, dt {header.get('dt')} s; classes "
              f"{', '.join(header.get('class_names', []))}", soft_wrap=True)
    training = header.get("training")
    if not training:
        out.print("no training record (written before `rig model train` recorded one)")
        return 0
    selection = training.get("selection", {})
    split = selection.get("split", {})
    out.print(f"data: {training.get('data')}", soft_wrap=True)
    out.print(f"settings chosen on {selection.get('on')}: {split.get('fraction')} of each "
              f"scene's clips (seed {split.get('seed')}), "
              f"{split.get('validation', {}).get('slices')} validation / "
              f"{split.get('fit', {}).get('slices')} fit slices; {selection.get('rule')}",
              soft_wrap=True)
    table = Table(title="Candidates (XyloSim on the quantised spec)")
    for column in ("hidden", "ridge", "validation accuracy", ""):
        table.add_column(column, justify="right")
    chosen = selection.get("chosen", {})
    for c in selection.get("candidates", []):
        mark = "chosen" if (c.get("n_hidden"), c.get("ridge")) == (
            chosen.get("n_hidden"), chosen.get("ridge")) else ""
        table.add_row(str(c.get("n_hidden")), f"{c.get('ridge'):g}",
                      f"{c.get('validation_accuracy'):.3f}", mark)
    out.print(table)
    final = training.get("final_fit", {})
    out.print(f"final fit on {final.get('on')} ({final.get('slices')} slices): train accuracy "
              f"{final.get('train_accuracy')}", soft_wrap=True)
    return 0
