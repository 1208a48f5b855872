"""`rig report` end to end: a virtual-bench ASC run, a Xylo (XyloSim) run and a small real QUBO
sweep, made here, turned into report.md / report.html / report.pdf / results.json. The PDF is read
back with poppler (pdftotext, pdftoppm) as a person would see it.

Most runs, reports and refusals are made in this process (`rig_in_process`): a new
interpreter's start-up and imports (numpy, matplotlib, weasyprint) cost more CPU than most of
these commands' work. Still run as a user runs them: the Xylo run, the report over all three,
one `rig show`, one refusal (its single line on stderr is all the console script prints)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import numpy as np
import pytest

from rig.traces.analysis.uncertainty import with_uncertainty
from tests.requires import needs

from .runs import REPO, RIG, bench_variant, only_run, rig_in_process, run_rig

pytestmark = [pytest.mark.slow, needs("matplotlib", "weasyprint")]

REQUIRED = ("System architecture", "Algorithm", "Workflow", "Latency measurement",
            "Power measurement", "Results")
TODO = "To be completed by the submitter"
SMALL_SWEEP = """
[sweep]
name = "tiny"
suts = ["cpu-sa"]
nodes = [10, 25]
densities = [0.05]
timeouts = [0.002, 0.01]
seeds = [0, 1, 2, 3, 4]
"""


def _poppler(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.fail(f"{tool} (poppler-utils) is missing: `make system-deps` installs it")
    return path


def pdf_pages(pdf: Path) -> list[str]:
    """The PDF's text, page by page (pdftotext separates pages with form feeds)."""
    text = subprocess.run([_poppler("pdftotext"), "-layout", str(pdf), "-"], check=True,
                          capture_output=True, text=True, timeout=60).stdout
    return [p for p in text.split("\f") if p.strip()]


def tree_digest(folder: Path) -> dict[str, str]:
    """Every file under `folder` with its SHA-256 and mtime (proof nothing was touched)."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        + f"@{p.stat().st_mtime_ns}"
        for p in sorted(folder.rglob("*")) if p.is_file()
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """One ASC run on the virtual bench, one on XyloSim, one small real QUBO sweep."""
    root = tmp_path_factory.mktemp("report-runs")
    out: dict[str, Path] = {}
    bench = bench_variant(root, "sim-small", samples=("samples_per_class = 10",
                                                      "samples_per_class = 2"))
    proc = rig_in_process("measure", "asc", "--bench", str(bench), "--runs-dir",
                          str(root / "asc"))
    assert proc.returncode == 0, proc.stderr
    out["asc"] = only_run(root / "asc")

    model = REPO / "firmware" / "xylo" / "models" / "asc_synthetic.npz"
    text = (REPO / "benches" / "xylo.toml").read_text()
    text = text.replace('spec = "../firmware/xylo/models/asc_synthetic.npz"',
                        f'spec = "{model}"').replace("samples_per_class = 10",
                                                     "samples_per_class = 1")
    (root / "xylo.toml").write_text(text)
    # As a user runs it (the file's one console-script `rig measure`), which also keeps Rockpool
    # out of this process (its import warns of a missing torch).
    env = dict(os.environ)  # RIG_CACHE: the session's (conftest)
    proc = subprocess.run([*RIG, "measure", "asc", "--bench", str(root / "xylo.toml"),
                           "--runs-dir", str(root / "xylo")], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    out["xylo"] = only_run(root / "xylo")

    (root / "tiny.toml").write_text(SMALL_SWEEP)
    proc = rig_in_process("sweep", "qubo", str(root / "tiny.toml"), "--runs-dir",
                          str(root / "sweep"))
    assert proc.returncode == 0, proc.stderr
    out["sweep"] = only_run(root / "sweep")
    return out


@pytest.fixture(scope="module")
def report(runs, tmp_path_factory) -> tuple[Path, dict[str, dict[str, str]]]:
    """The report over all three, and the run folders' digests from before it was made."""
    before = {k: tree_digest(p) for k, p in runs.items()}
    out = tmp_path_factory.mktemp("report")
    proc = run_rig("report", str(runs["asc"]), str(runs["xylo"]), str(runs["sweep"]),
                   "--out", str(out), timeout=300)
    assert proc.returncode == 0, proc.stderr
    return out, before


def test_report_files_are_written(report) -> None:
    out, _ = report
    for name in ("report.md", "report.html", "report.pdf", "results.json"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    assert (out / "report.pdf").read_bytes().startswith(b"%PDF-")


def test_every_required_section_is_in_md_html_and_pdf(report) -> None:
    out, _ = report
    md = (out / "report.md").read_text()
    html = (out / "report.html").read_text()
    pdf = "\n".join(pdf_pages(out / "report.pdf"))
    for system in (1, 2, 3):  # ASC sim, ASC Xylo, QUBO cpu-sa: each has every section
        for n, heading in enumerate(REQUIRED, start=1):
            title = f"{system}.{n} {heading}"
            assert title in md, title
            assert title in html, title
            assert title in pdf, title


def test_every_number_in_results_json_is_rig_show_json(report, runs) -> None:
    out, _ = report
    results = json.loads((out / "results.json").read_text())
    by_path = {r["path"]: r for r in results["runs"]}
    assert set(by_path) == {str(p.resolve()) for p in runs.values()}
    for n, path in enumerate(runs.values()):
        # the first as a user runs it, the others in this process (start-up and imports)
        proc = (run_rig if n == 0 else rig_in_process)("show", str(path.resolve()), "--json")
        assert proc.returncode == 0, proc.stderr
        assert by_path[str(path.resolve())]["show"] == json.loads(proc.stdout)


def test_numbers_in_the_text_are_the_shown_ones(report, runs) -> None:
    out, _ = report
    results = json.loads((out / "results.json").read_text())
    asc = next(r for r in results["runs"] if r["path"] == str(runs["asc"].resolve()))["show"]
    s = asc["summary"]
    energy = f"{s['energy_per_inference_j'] * 1e6:#.4g} µJ"   # e.g. 45.00 µJ
    idle = f"{s['idle_power_w'] * 1e3:#.4g} mW"               # e.g. 1.200 mW
    rate = f"{s['inferences_per_s']:#.4g} /s"                 # e.g. 80.00 /s
    md = (out / "report.md").read_text()
    pdf = "\n".join(pdf_pages(out / "report.pdf"))
    for text in (energy, idle, rate, f"{s['accuracy'] * 100:.2f}%"):
        assert text in md, text
        assert text in pdf, text
    # The simulated truth of the virtual bench, so the formatting is checked too.
    assert energy == "45.00 µJ" and idle == "1.200 mW" and rate == "80.00 /s"


def test_simulated_label_on_every_page_with_simulated_numbers(report, runs) -> None:
    out, _ = report
    results = json.loads((out / "results.json").read_text())
    systems = {s["id"]: s for s in results["systems"]}
    assert systems["dut-asc01"]["simulated"] == "virtual bench"
    assert systems["xylo-xylo-asc-synth01"]["simulated"] == "XyloSim"
    assert systems["cpu-sa"]["simulated"] is None
    pages = pdf_pages(out / "report.pdf")
    asc_numbers = "45.00 µJ"
    xylo_pages = [p for p in pages if "xylo-asc-synth01" in p]
    sim_pages = [p for p in pages if asc_numbers in p] + xylo_pages
    assert sim_pages and xylo_pages
    for page in sim_pages:
        assert "SIMULATED" in page, page[:400]
    md = (out / "report.md").read_text()
    assert "SIMULATED (virtual bench)" in md and "SIMULATED (XyloSim)" in md


def test_figures_exist_and_are_images(report) -> None:
    import matplotlib.image as mpimg

    out, _ = report
    figures = sorted((out / "figures").glob("*.png"))
    keys = {p.name for p in figures}
    for expected in ("dut-asc01-asc-trace.png", "dut-asc01-asc-energy.png",
                     "dut-asc01-asc-throughput.png", "dut-asc01-workflow.png",
                     "xylo-xylo-asc-synth01-workflow.png", "cpu-sa-qubo-gap.png",
                     "cpu-sa-workflow.png"):
        assert expected in keys, sorted(keys)
    assert "xylo-xylo-asc-synth01-asc-energy.png" not in keys  # XyloSim: no power, no figure
    for path in figures:
        image = mpimg.imread(path)
        assert image.shape[0] > 200 and image.shape[1] > 400, path
        assert float(np.std(image)) > 0.01, path  # not a blank picture
    md = (out / "report.md").read_text()
    for path in figures:
        assert f"figures/{path.name}" in md, path.name


def test_pdf_pages_render_to_png(report, tmp_path) -> None:
    out, _ = report
    subprocess.run([_poppler("pdftoppm"), "-png", "-r", "50", "-f", "1", "-l", "1",
                    str(out / "report.pdf"), str(tmp_path / "page")], check=True, timeout=60)
    (png,) = tmp_path.glob("page*.png")
    import matplotlib.image as mpimg

    image = mpimg.imread(png)
    assert image.shape[0] > image.shape[1]  # A4 portrait
    assert float(np.std(image)) > 0.01


def test_html_is_self_contained(report) -> None:
    out, _ = report
    html = (out / "report.html").read_text()
    assert "data:image/png;base64," in html
    assert 'src="figures/' not in html and "<link" not in html


def test_unfilled_fields_are_boxes_and_listed(report) -> None:
    out, _ = report
    md = (out / "report.md").read_text()
    assert "TO BE COMPLETED BY THE SUBMITTER" in md
    results = json.loads((out / "results.json").read_text())
    missing = results["report"]["submitter_fields_missing"]
    assert "submission.title" in missing and "systems.cpu-sa.tuning" in missing
    assert TODO.upper() in "\n".join(pdf_pages(out / "report.pdf")).upper()


def test_run_folders_are_not_modified(report, runs) -> None:
    _, before = report
    for key, path in runs.items():
        assert tree_digest(path) == before[key], key


# -- system.toml -------------------------------------------------------------------------------
def test_template_lists_the_systems_and_a_filled_file_clears_the_boxes(runs, tmp_path) -> None:
    proc = rig_in_process("report", "--template", str(runs["asc"]), str(runs["sweep"]))
    assert proc.returncode == 0, proc.stderr
    data = tomllib.loads(proc.stdout)
    assert set(data["systems"]) == {"dut-asc01", "cpu-sa"}
    data["submission"] |= {"title": "Virtual bench demo", "submitter": "Rig Lab"}
    for table in data["systems"].values():
        table |= {"tuning": "trained on the train split only",
                  "components_omitted": "none: the bench powers only the DUT"}
    system = tmp_path / "system.toml"
    system.write_text(_toml(data))
    out = tmp_path / "report"
    proc = rig_in_process("report", str(runs["asc"]), str(runs["sweep"]), "--out", str(out),
                          "--system", str(system), "--format", "md,html", "--strict")
    assert proc.returncode == 0, proc.stderr
    md = (out / "report.md").read_text()
    assert "TO BE COMPLETED" not in md
    assert "# Virtual bench demo" in md and "trained on the train split only" in md
    assert not (out / "report.pdf").exists()


def test_strict_names_the_empty_fields(runs, tmp_path) -> None:
    system = tmp_path / "system.toml"
    system.write_text('[submission]\ntitle = "T"\nsubmitter = "S"\n'
                      '[systems.dut-asc01]\ncomponents_omitted = "none"\n')
    out = tmp_path / "report"
    proc = rig_in_process("report", str(runs["asc"]), "--out", str(out), "--system",
                          str(system), "--strict")
    assert proc.returncode == 2
    err = proc.stderr.strip()
    assert len(err.splitlines()) == 1 and "systems.dut-asc01.tuning" in err
    assert "components_omitted" not in err
    assert not out.exists()  # nothing written


@pytest.mark.parametrize("text, expected", [
    ('[systems.nosuch]\ntuning = "x"\n', "names no system in these runs"),
    ('[submission]\ntitel = "x"\n', "unknown key 'titel'"),
    ('[submission]\ntitle = 3\n', "expected text in quotes"),
    ("[submission\n", "not valid TOML"),
])
def test_bad_system_file_is_one_line(runs, tmp_path, text, expected) -> None:
    system = tmp_path / "system.toml"
    system.write_text(text)
    proc = rig_in_process("report", str(runs["asc"]), "--out", str(tmp_path / "r"), "--system",
                          str(system))
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and expected in proc.stderr


# -- bad run folders ---------------------------------------------------------------------------
def test_a_folder_that_is_not_a_run(tmp_path) -> None:
    (tmp_path / "empty").mkdir()
    proc = run_rig("report", str(tmp_path / "empty"), "--out", str(tmp_path / "r"))
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "is not a run folder" in proc.stderr
    assert not (tmp_path / "r").exists()


def test_a_truncated_manifest(runs, tmp_path) -> None:
    copy = tmp_path / runs["asc"].name
    shutil.copytree(runs["asc"], copy)
    text = (copy / "manifest.json").read_text()
    (copy / "manifest.json").write_text(text[: len(text) // 2])
    proc = rig_in_process("report", str(copy), "--out", str(tmp_path / "r"))
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "manifest.json is truncated or not JSON" in proc.stderr


def test_an_unfinished_run_is_refused_unless_allowed_then_marked(runs, tmp_path) -> None:
    copy = tmp_path / runs["asc"].name
    shutil.copytree(runs["asc"], copy)
    lines = (copy / "events.jsonl").read_text().splitlines(keepends=True)
    assert json.loads(lines[-1])["event"] == "run_finished"
    (copy / "events.jsonl").write_text("".join(lines[:-1]))  # as if killed before the end
    before = tree_digest(copy)
    proc = rig_in_process("report", str(copy), "--out", str(tmp_path / "r"))
    assert proc.returncode == 2
    assert "ended without finishing" in proc.stderr and "--allow-incomplete" in proc.stderr
    proc = rig_in_process("report", str(copy), "--out", str(tmp_path / "r"),
                          "--allow-incomplete")
    assert proc.returncode == 0, proc.stderr
    pages = pdf_pages(tmp_path / "r" / "report.pdf")
    assert any("INCOMPLETE" in p for p in pages)
    assert "INCOMPLETE" in (tmp_path / "r" / "report.md").read_text()
    assert tree_digest(copy) == before


def test_out_inside_a_run_folder_is_refused(runs, tmp_path) -> None:
    before = tree_digest(runs["asc"])
    proc = rig_in_process("report", str(runs["asc"]), "--out", str(runs["asc"] / "report"))
    assert proc.returncode == 2 and "run folders are never modified" in proc.stderr
    assert tree_digest(runs["asc"]) == before


def _toml(data: dict) -> str:
    lines = []
    for table, values in (("submission", data["submission"]),
                          *((f"systems.{k}", v) for k, v in data["systems"].items())):
        lines.append(f"[{table}]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in values.items()]
    return "\n".join(lines) + "\n"


def test_figures_carry_their_uncertainty_and_the_appendix_every_budget(report, runs) -> None:
    """The results table reads figure ± U (k) as `rig show` does (the virtual LPM01A publishes
    no supply or clock accuracy: incomplete, U a lower bound); the appendix "Uncertainty
    budgets" has each figure's components, u_c, ν_eff, k and U, in the PDF too."""
    out, _ = report
    results = json.loads((out / "results.json").read_text())
    asc = next(r for r in results["runs"] if r["path"] == str(runs["asc"].resolve()))["show"]
    budget = asc["summary"]["uncertainty"]["energy_per_inference_j"]
    shown = with_uncertainty(asc["summary"]["energy_per_inference_j"], "J", budget)
    assert shown.startswith("45.00 µJ ± ≥") and shown.endswith("(k=2, incomplete)")
    md = (out / "report.md").read_text()
    assert f"| Energy per inference (median of windows) | {shown} |" in md
    appendix = md[md.index("## Appendix: uncertainty budgets"):]
    assert "| Component | Type | Standard uncertainty | ν | Source | Known |" in appendix
    assert f"{shown}: u_c = " in appendix
    assert "**Incomplete**: unknown supply voltage, lpm01a sample clock" in appendix
    pdf = "\n".join(pdf_pages(out / "report.pdf"))
    assert "Appendix: uncertainty budgets" in pdf and "(k=2, incomplete)" in pdf
