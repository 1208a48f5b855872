"""The report's pieces without a bench: number formatting, the document renderings, system.toml,
and the sweep summary's time-to-solution and largest-workload rows it reports."""

from __future__ import annotations

from pathlib import Path

import pytest

from rig.errors import ConfigError
from rig.qubo.sweep import SweepPointDone, SweepSpec, summarize
from rig.report.content import gap_text, pct
from rig.report.document import Box, Document, Heading, Para, Table, to_html, to_markdown
from rig.report.system import SystemInfo, load_system, template
from rig.units import si


@pytest.mark.parametrize("value, unit, text", [
    (4.5e-05, "J", "45.00 µJ"),
    (1.2e-3, "W", "1.200 mW"),
    (0.0125, "s", "12.50 ms"),
    (80.0, "Hz", "80.00 Hz"),
    (1000.0, "Hz", "1.000 kHz"),
    (2.5, "W", "2.500 W"),
    (3e-9, "s", "3.000 ns"),
    (0.0, "J", "0 J"),
    (None, "J", "—"),
    (-2.4e-3, "W", "-2.400 mW"),
    (999.96, "W", "1.000 kW"),
    (float("nan"), "J", "n/a"),
])
def test_si_prefixes(value, unit, text) -> None:
    assert si(value, unit) == text


def test_percentages_and_gaps() -> None:
    assert pct(0.875) == "87.50%"
    assert gap_text(0.0667) == "+6.67%" and gap_text(-0.02) == "-2.00%" and gap_text(None) == "—"


def test_markdown_and_html_state_the_same_blocks(tmp_path: Path) -> None:
    doc = Document("Title <x>", "made today")
    doc.add(Heading(1, "1. System", "s1", running="SIMULATED (virtual bench)"),
            Para("uses `code` and **bold** and a | pipe"),
            Table(("Metric", "Value"), (("Energy", "45.00 µJ"),), caption="Results", align="lr"),
            Box("todo", "Tuning history", "Fill in `tuning`."))
    md = to_markdown(doc, tmp_path)
    assert md.startswith("# Title \\<x\\>\n")
    assert "## 1. System" in md and "| Energy | 45.00 µJ |" in md and "| --- | ---: |" in md
    assert "> **TO BE COMPLETED BY THE SUBMITTER: Tuning history**" in md
    html = to_html(doc, css="body{}")
    assert "<h1>Title &lt;x&gt;</h1>" in html
    assert '<h2 id="s1" class="running-sim" data-running="SIMULATED (virtual bench)">' in html
    assert "<code>code</code>" in html and "<strong>bold</strong>" in html
    assert '<td class="r">45.00 µJ</td>' in html
    assert 'class="box todo"' in html


def test_system_file_fields_and_missing(tmp_path: Path) -> None:
    path = tmp_path / "system.toml"
    path.write_text('[submission]\ntitle = "T"\nsubmitter = ""\n'
                    '[systems.cpu-sa]\ntuning = "seeds 0-4 only"\n')
    info = load_system(path, ["cpu-sa", "dut-asc01"])
    assert info.system_value("cpu-sa", "tuning") == "seeds 0-4 only"
    assert info.missing(["cpu-sa", "dut-asc01"]) == [
        "submission.submitter", "systems.cpu-sa.components_omitted",
        "systems.dut-asc01.tuning", "systems.dut-asc01.components_omitted"]
    assert SystemInfo().missing([]) == ["submission.title", "submission.submitter"]


def test_template_is_valid_toml_with_a_table_per_system() -> None:
    import tomllib

    data = tomllib.loads(template([("dut-asc01", "ASC: dut"), ("cpu-sa", "QUBO: sa")]))
    assert set(data["systems"]) == {"dut-asc01", "cpu-sa"}
    assert data["submission"]["title"] == "" and "tuning" in data["systems"]["cpu-sa"]


@pytest.mark.parametrize("text, message", [
    ("[other]\n", "unknown table [other]"),
    ("[systems.x]\ntuning = 'a'\n", "[systems.x] names no system in these runs"),
    ("[systems.cpu-sa]\ntunning = 'a'\n", "unknown key 'tunning'"),
    ("[submission]\ntitle = true\n", "expected text in quotes"),
])
def test_system_file_errors_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "system.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_system(path, ["cpu-sa"])


def test_missing_system_file() -> None:
    with pytest.raises(ConfigError, match="system file not found"):
        load_system(Path("/nonexistent/system.toml"), [])


# -- the sweep summary's rows the report states ---------------------------------------------------
def _point(spec: SweepSpec, sut: str, nodes: int, timeout: float, seed: int, cost: int,
           tts: dict | None = None, status: str = "ok") -> SweepPointDone:
    from rig.qubo.sweep import SweepPoint

    key = SweepPoint(0, sut, nodes, spec.densities[0], timeout, seed).key
    return SweepPointDone(key=key, sut=sut, nodes=nodes, density=spec.densities[0],
                          timeout_s=timeout, seed=seed, status=status,
                          result={"cost": cost, "gap": 0.0, "tts": tts or {}})


def test_time_to_solution_is_averaged_over_the_seeds_that_reached_it() -> None:
    spec = SweepSpec(suts=("cpu-sa",), nodes=(10,), densities=(0.05,), timeouts=(1.0,),
                     seeds=(0, 1, 2))
    hit = {"0.1": {"latency_s": 0.2, "energy_j": 0.4, "cost": -5}, "0.01": None}
    hit2 = {"0.1": {"latency_s": 0.4, "energy_j": None, "cost": -5}, "0.01": None}
    done = {p.key: p for p in (
        _point(spec, "cpu-sa", 10, 1.0, 0, -5, hit),
        _point(spec, "cpu-sa", 10, 1.0, 1, -5, hit2),
        _point(spec, "cpu-sa", 10, 1.0, 2, -4, {"0.1": None, "0.01": None}),
    )}
    (row,) = summarize(spec, done)["rows"]
    assert row["tts"]["0.1"] == {"reached": 2, "latency_s_mean": pytest.approx(0.3),
                                 "energy_j_mean": pytest.approx(0.4), "energy_seeds": 1}
    assert row["tts"]["0.01"] == {"reached": 0, "latency_s_mean": None, "energy_j_mean": None,
                                  "energy_seeds": 0}


def test_largest_solved_stops_at_the_first_size_a_seed_did_not_solve() -> None:
    spec = SweepSpec(suts=("cpu-sa",), nodes=(10, 25, 50, 100), densities=(0.05,),
                     timeouts=(0.01, 1.0), seeds=(0, 1))
    costs = {10: (-3, -4), 25: (-8, -9), 50: (-12, 0), 100: (-20, -21)}
    done = {}
    for nodes, (c0, c1) in costs.items():
        for seed, cost in ((0, c0), (1, c1)):
            p = _point(spec, "cpu-sa", nodes, 1.0, seed, cost)
            done[p.key] = p
            short = _point(spec, "cpu-sa", nodes, 0.01, seed, 0)  # the short timeout: ignored
            done[short.key] = short
    (row,) = summarize(spec, done)["largest_solved"]
    # 50 nodes: seed 1 stayed at the trivial cost 0, so 100 (solved) does not count either.
    assert row == {"sut": "cpu-sa", "density": 0.05, "timeout_s": 1.0, "nodes": 25}
