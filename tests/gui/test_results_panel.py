"""The runner's results and earlier-runs lists on a run folder whose manifest.json is damaged
(issue 13.8): no crash, the message shown, the folder listed as "damaged"."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from pathlib import Path

from gui.results_panel import EarlierRuns, ResultsPanel
from tests.rig.test_damaged_manifest import asc_run, damage


def test_results_show_a_damaged_folder_from_its_events_with_a_message(qtbot, tmp_path: Path
                                                                      ) -> None:
    run = asc_run(tmp_path, finished=True)
    reason = damage(run, "truncated")
    panel = ResultsPanel()
    qtbot.addWidget(panel)
    said: list[tuple[str, str, str]] = []
    panel.message.connect(lambda *m: said.append(m))
    assert panel.show_run(run)
    assert "DAMAGED" in panel.title.text()
    assert panel.cell_texts()["Energy per inference (median of windows)"] == "45.00 µJ"
    assert len(said) == 1 and said[0][0] == "warning"
    assert reason in said[0][1] and "events.jsonl" in said[0][1]
    assert not panel.report_button.isEnabled()


def test_earlier_runs_list_a_damaged_folder(qtbot, tmp_path: Path) -> None:
    good = asc_run(tmp_path, finished=True)
    bad = asc_run(tmp_path, finished=True)
    reason = damage(bad, "list")
    runs = EarlierRuns()
    qtbot.addWidget(runs)
    runs.set_root(tmp_path)
    rows = {runs.tree.topLevelItem(i).text(4): runs.tree.topLevelItem(i)
            for i in range(runs.tree.topLevelItemCount())}
    assert rows[good.name].text(3) == "complete"
    assert rows[bad.name].text(3) == "damaged" and rows[bad.name].text(1) == "asc"
    assert reason in rows[bad.name].toolTip(3)


def test_earlier_runs_list_a_refused_folder_as_refused(qtbot, tmp_path: Path) -> None:
    """A folder the instrument refused (issue 22.9): "refused" in the list, with what it means."""
    from rig.run.summary import REFUSED_TEXT
    from tests.e2e.test_refusals import refused_run

    run, _ = refused_run(tmp_path)
    runs = EarlierRuns()
    qtbot.addWidget(runs)
    runs.set_root(run.parent)
    item = runs.tree.topLevelItem(0)
    assert runs.tree.topLevelItemCount() == 1 and item.text(4) == run.name
    assert item.text(3) == "refused" and item.toolTip(3) == REFUSED_TEXT


def test_results_show_each_figure_with_its_uncertainty(qtbot, sim_run, tmp_path: Path) -> None:
    """The results tab reads figure ± U (k) as `rig show` does; an incomplete budget (the
    virtual LPM01A publishes no supply or clock accuracy) is marked, a row names the unknown
    terms and each figure's tooltip says what the ± means."""
    from rig.run.summary import figures_note
    from rig.traces.analysis.uncertainty import with_uncertainty

    run, show = sim_run
    s = show["summary"]
    panel = ResultsPanel()
    qtbot.addWidget(panel)
    panel.resize(900, 640)
    assert panel.show_run(run)
    cells = panel.cell_texts()
    energy = cells["Energy per inference (median of windows)"]
    assert energy == with_uncertainty(s["energy_per_inference_j"], "J",
                                      s["uncertainty"]["energy_per_inference_j"])
    assert energy.startswith("45.00 µJ ± ≥") and energy.endswith("(k=2, incomplete)")
    assert cells["Uncertainty"] == figures_note(s)
    row = [panel.table.item(r, 0).text() for r in range(panel.table.rowCount())].index(
        "Energy per inference (median of windows)")
    assert "Unknown here: supply voltage, lpm01a sample clock" in \
        panel.table.item(row, 1).toolTip()
    panel.table.resizeColumnsToContents()
    assert panel.grab().save(str(tmp_path / "results.png"))
