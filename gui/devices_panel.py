"""Detect and handshake: the serial ports with what answers on each, and the bench's devices.

The port list is `rig devices --probe` (`rig.bench.ports.scan_ports`), refreshed when a port
appears or goes (hot-plug is polled: listing ports is cheap, probing is done only for new ones).
"Check bench" is `rig devices --check` (`rig.run.bench_check.check_bench`): it opens the bench's
monitor and DUT, reads who they are, and powers the DUT off again. Both run off the GUI thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6 import QtCore, QtGui, QtWidgets

from gui.background import Background, Done
from rig.bench.config import Bench

#: How often the port list is polled for hot-plug [ms].
HOTPLUG_MS = 2000
STATE_COLOURS = {
    "answering": "#d3f0d8", "found": "#fff3cd", "wrong mode": "#f8d7da", "busy": "#f8d7da",
    "missing": "#f8d7da", "error": "#f8d7da", "not checked": "#eeeeee", "not used": "#eeeeee",
    "instrument": "#dbe7f6", "checking…": "#eeeeee",
}


class DevicesPanel(QtWidgets.QGroupBox):
    """Ports and the bench's device states."""

    #: Port names seen by the last scan (offered to the bench form).
    ports_changed = QtCore.Signal(list)
    message = QtCore.Signal(str, str, str)

    def __init__(self, parent: QtWidgets.QWidget | None = None, *,
                 lister: Callable[[], list[Any]] | None = None,
                 probe_timeout_s: float = 1.0) -> None:
        super().__init__("Devices", parent)
        self._lister = lister
        self._probe_timeout_s = probe_timeout_s
        self._jobs: set[Background] = set()
        self._known: tuple[str, ...] | None = None
        self.ports: list[dict[str, Any]] = []
        self.states: list[Any] = []

        self.port_table = _table(("Port", "State", "Looks like", "Answer", "USB id"))
        self.port_table.setObjectName("portTable")
        self.device_table = _table(("Device", "State", "Detail"))
        self.device_table.setObjectName("deviceTable")
        self.rescan_button = QtWidgets.QPushButton("Rescan ports")
        self.rescan_button.clicked.connect(lambda: self.scan(force=True))
        self.check_button = QtWidgets.QPushButton("Check bench")
        self.check_button.setToolTip("open the bench's monitor and DUT, read who they are, and "
                                     "power the DUT off again")
        self.status = QtWidgets.QLabel("")
        self.status.setWordWrap(True)
        buttons = QtWidgets.QHBoxLayout()
        buttons.addWidget(self.rescan_button)
        buttons.addWidget(self.check_button)
        buttons.addStretch(1)
        box = QtWidgets.QVBoxLayout(self)
        self.port_table.setMaximumHeight(160)
        self.device_table.setMinimumHeight(120)
        box.addWidget(QtWidgets.QLabel("Serial ports"))
        box.addWidget(self.port_table, 1)
        box.addWidget(QtWidgets.QLabel("This bench"))
        box.addWidget(self.device_table, 1)
        box.addLayout(buttons)
        box.addWidget(self.status)

        self._hotplug = QtCore.QTimer(self)
        self._hotplug.setInterval(HOTPLUG_MS)
        self._hotplug.timeout.connect(lambda: self.scan(force=False))

    def start_hotplug(self) -> None:
        """Scan now and whenever the set of ports changes."""
        self.scan(force=True)
        self._hotplug.start()

    def stop_hotplug(self) -> None:
        """No more polling (while a run uses the ports: a probe must not knock on them)."""
        self._hotplug.stop()

    @property
    def busy(self) -> bool:
        """Whether a scan or check is under way."""
        return any(job.busy for job in self._jobs)

    # -- ports ----------------------------------------------------------------------------------
    def _list(self) -> list[Any]:
        if self._lister is not None:
            return list(self._lister())
        from serial.tools import list_ports

        return list(list_ports.comports())

    def scan(self, *, force: bool) -> None:
        """List the ports (off the GUI thread); probe them if the set changed or `force`."""
        if self.busy:
            return
        known = self._known

        def work() -> list[dict[str, Any]] | None:
            from rig.bench.ports import scan_ports

            names = tuple(sorted(p.device for p in self._list()))
            if not force and names == known:
                return None
            return scan_ports(probe=True, timeout_s=self._probe_timeout_s, lister=self._list)

        self.status.setText("scanning ports…")
        self._run(work, self._scanned)

    def _scanned(self, done: Done) -> None:
        self.status.setText("")
        if not done.ok:
            self.message.emit("error", f"port scan: {done.error}", done.hint)
            return
        if done.value is None:
            return  # nothing plugged or unplugged
        self.ports = done.value
        self._known = tuple(sorted(p["port"] for p in self.ports))
        self.port_table.setRowCount(len(self.ports))
        for row, p in enumerate(self.ports):
            ids = f"{p['vid']}:{p['pid']}" if p.get("vid") else "—"
            hs = p.get("handshake") or {}
            answer = (f"DUT '{hs.get('name')}' ({hs.get('vendor')})" if hs.get("answer") == "dut"
                      else hs.get("reply") or hs.get("answer") or "")
            _fill(self.port_table, row, (p["port"], p.get("state", ""), p.get("looks_like") or
                                         p.get("description") or "", answer, ids))
            _colour(self.port_table, row, 1, p.get("state", ""))
        self.port_table.resizeColumnsToContents()
        if not self.ports:
            self.status.setText("no serial ports found (plug in a board, or use a virtual bench)")
        self.ports_changed.emit([p["port"] for p in self.ports])

    # -- the bench ------------------------------------------------------------------------------
    def check(self, bench: Bench) -> None:
        """Handshake with the bench's devices (off the GUI thread)."""
        if self.busy:
            self.message.emit("info", "a port scan or check is still going; try again", "")
            return
        from rig.run.bench_check import check_bench

        self.device_table.setRowCount(1)
        _fill(self.device_table, 0, ("bench", "checking…", "opening the monitor and the DUT"))
        self.check_button.setEnabled(False)
        self._run(lambda: check_bench(bench), self._checked)

    def _checked(self, done: Done) -> None:
        self.check_button.setEnabled(True)
        if not done.ok:
            self.device_table.setRowCount(0)
            self.message.emit("error", done.error, done.hint)
            return
        self.states = list(done.value.devices)
        self.device_table.setRowCount(len(self.states))
        for row, s in enumerate(self.states):
            _fill(self.device_table, row, (s.role, s.state, s.detail))
            _colour(self.device_table, row, 1, s.state)
            # Everything the device said about itself (capabilities, serial, settings).
            info = "\n".join(f"{k}: {v}" for k, v in s.info.items())
            detail = self.device_table.item(row, 2)
            if detail is not None:  # _fill made it
                detail.setToolTip(f"{s.detail}\n\n{info}" if info else s.detail)
        self.device_table.resizeColumnToContents(0)
        self.device_table.resizeColumnToContents(1)
        self.device_table.resizeRowsToContents()
        bad = [s for s in self.states if s.state not in ("answering", "not used")]
        if bad:
            self.message.emit("error", "; ".join(f"{s.role}: {s.state} ({s.detail})"
                                                 for s in bad), "")
        else:
            self.message.emit("info", "every device of the bench answered; the DUT is "
                              "powered off again", "")

    def state_of(self, role: str) -> str | None:
        """The last check's state of a device ("dut", "emon", ...)."""
        return next((s.state for s in self.states if s.role == role), None)

    def _run(self, work: Callable[[], Any], then: Callable[[Done], None]) -> None:
        job: Background

        def finish(done: Done) -> None:
            self._jobs.discard(job)
            then(done)

        job = Background(work, finish, self)
        self._jobs.add(job)
        job.start()


def _table(headers: tuple[str, ...]) -> QtWidgets.QTableWidget:
    table = QtWidgets.QTableWidget(0, len(headers))
    table.setHorizontalHeaderLabels(list(headers))
    table.verticalHeader().setVisible(False)
    table.setEditTriggers(QtWidgets.QAbstractItemView.EditTrigger.NoEditTriggers)
    table.setSelectionBehavior(QtWidgets.QAbstractItemView.SelectionBehavior.SelectRows)
    table.horizontalHeader().setStretchLastSection(True)
    table.setWordWrap(True)
    table.setMinimumHeight(90)
    return table


def _fill(table: QtWidgets.QTableWidget, row: int, values: tuple[str, ...]) -> None:
    for col, value in enumerate(values):
        item = QtWidgets.QTableWidgetItem(str(value))
        item.setToolTip(str(value))
        table.setItem(row, col, item)


def _colour(table: QtWidgets.QTableWidget, row: int, col: int, state: str) -> None:
    item = table.item(row, col)
    if item is not None and state in STATE_COLOURS:
        item.setBackground(QtGui.QColor(STATE_COLOURS[state]))
