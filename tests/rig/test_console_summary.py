"""The console summary table (`rig measure`, `rig show`) reads the same figures as the report and
the runner GUI (`ASC_FIGURES`), so a power level reads in the unit that suits it."""

from __future__ import annotations

import io

from rich.console import Console

from rig.run.console import ConsoleView, summary_table
from rig.run.events import Note
from rig.run.summary import asc_figure_rows

# Known levels: 5 V at 0.5 A idle, 5 V at 0.6 A active (closed form: 2.5 W and 3.0 W, 0.5 W
# dynamic); 0.5 W over 2 ms is 1 mJ per inference.
VOLTS, IDLE_A, ACTIVE_A, EXEC_S = 5.0, 0.5, 0.6, 2e-3
SUMMARY = {
    "idle_power_w": VOLTS * IDLE_A,
    "active_power_w": VOLTS * ACTIVE_A,
    "dynamic_power_w": VOLTS * (ACTIVE_A - IDLE_A),
    "dynamic_energy_per_inference_j": VOLTS * (ACTIVE_A - IDLE_A) * EXEC_S,
}


def rows_of(summary: dict) -> dict[str, str]:
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(summary_table(summary, title="t"))
    cells = [line.split("│")[1:3] for line in console.export_text().splitlines() if "│" in line]
    return {label.strip(): value.strip() for label, value in cells}


def test_watts_read_as_watts() -> None:
    rows = rows_of(SUMMARY)
    assert rows["Idle power"] == "2.500 W"
    assert rows["Active power"] == "3.000 W"
    assert rows["Dynamic power"] == "500.0 mW"
    assert rows["Dynamic energy per inference (dynamic power x mean execution time)"] == "1.000 mJ"


def test_microwatts_read_as_microwatts() -> None:
    # 1.8 V at 10 µA: 18 µW
    rows = rows_of({"idle_power_w": 1.8 * 10e-6})
    assert rows["Idle power"] == "18.00 µW"


def test_console_rows_are_the_report_and_gui_figures() -> None:
    rows = rows_of(SUMMARY)
    for label, text in asc_figure_rows(SUMMARY):
        assert rows[label] == text


def test_a_note_is_shown_as_written_not_as_markup() -> None:
    """Notes name bench-file tables ("[dut]") and DUT replies ("e-[...]"): rich must not take
    them for style tags and drop them."""
    out = io.StringIO()
    view = ConsoleView(Console(file=out, width=200, force_terminal=False))
    view(Note(level="info", text="set in [dut] of bench.toml: download = \"binary\""))
    view(Note(level="warning", text="sample 3 failed: e-[bload timeout] [bold]"))
    view.close()
    text = out.getvalue()
    assert 'info: set in [dut] of bench.toml: download = "binary"' in text
    assert "warning: sample 3 failed: e-[bload timeout] [bold]" in text
