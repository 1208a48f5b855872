"""The bench: pick a bench file (or the virtual bench), edit it in a form, save it as TOML.

The form edits the file's own tables (so `lpm01a-sim` stays `lpm01a-sim`, and tables the form
does not show are kept); `bench()` validates the result with the rig's `parse_bench`, the same
check the CLI makes. The supply-voltage field cannot go above the bench's voltage limit, and a
file that asks for more is refused until a voltage within the limit is chosen.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from PySide6 import QtCore, QtWidgets

from rig.bench.config import (
    DATASETS,
    EMON_DRIVERS,
    PPK2_MODES,
    SIM_SUFFIX,
    TIMESTAMP_MODES,
    VIRTUAL_PORT,
    Bench,
    bench_entries,
    benches_dir,
    current_range_choices,
    current_range_help,
    known_devices,
    parse_bench,
    read_toml,
)
from rig.errors import ConfigError

#: Drivers the form offers: the real ones, then their virtual-bench stand-ins.
DRIVER_CHOICES = (*EMON_DRIVERS, *(f"{d}{SIM_SUFFIX}" for d in ("lpm01a", "joulescope",
                                                                 "n6705", "34465a", "ppk2",
                                                                 "otii")))
SAMPLE_RATES = ("1000", "10000", "100000", "1000000", "2000000")
OPEN_FILE = "Open a bench file…"
NEW_BENCH = "New bench…"

#: A new bench: the virtual bench's wiring, to be changed to the detected ports.
NEW_RAW: dict[str, Any] = {
    "bench": {"name": "my bench", "voltage_limit_v": 3.3},
    "dut": {"kind": "mlperf-tiny", "port": "", "baud": 115200, "timestamp_mode": "energy"},
    "emon": {"driver": "lpm01a", "port": "", "sample_rate_hz": 1000.0,
             "supply_voltage_v": 1.8},
    "dataset": {"name": "synthetic-asc", "samples_per_class": 10},
}


class BenchPanel(QtWidgets.QGroupBox):
    """Bench chooser and form. `changed` fires when the bench (or a field) changes."""

    changed = QtCore.Signal()
    #: A message for the window's banner: (level, text, hint).
    message = QtCore.Signal(str, str, str)

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__("Bench", parent)
        self.path: Path | None = None
        self.label = ""
        self._raw: dict[str, Any] = {}
        self._loading = False
        #: The file asked for a supply above its limit: refused until the user picks one.
        self.voltage_refused: float | None = None

        self.choice = QtWidgets.QComboBox()
        self.choice.setObjectName("benchChoice")
        self.choice.activated.connect(self._chosen)
        self.where = QtWidgets.QLabel()
        self.where.setObjectName("benchPath")
        self.where.setWordWrap(True)
        self.where.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)

        self.name = QtWidgets.QLineEdit()
        self.limit = _spin(0.1, 60.0, 2, " V")
        self.limit.setToolTip("the highest supply voltage this DUT may ever get")
        self.dut_kind = _combo(("mlperf-tiny", "xylo"))
        self.dut_port = _combo((VIRTUAL_PORT,), editable=True)
        self.baud = QtWidgets.QSpinBox()
        self.baud.setRange(300, 4_000_000)
        self.mode = _combo(TIMESTAMP_MODES)
        self.driver = _combo(DRIVER_CHOICES)
        self.emon_port = _combo((VIRTUAL_PORT,), editable=True)
        self.voltage = _spin(0.0, 3.3, 3, " V")
        self.voltage.setObjectName("supplyVoltage")
        self.current_range = _combo(("auto",), editable=True)
        self.current_range.setObjectName("currentRange")
        self.ppk2_mode = _combo(PPK2_MODES)
        self.ppk2_mode.setObjectName("ppk2Mode")
        self.ppk2_mode.setToolTip("source: the PPK2 powers the DUT at the supply voltage; "
                                  "ampere: it measures in series with the bench's supply")
        self.rate = _combo(SAMPLE_RATES, editable=True)
        self.rate.setToolTip("samples per second (the monitor may round it to what it can do)")
        self.dataset = _combo(DATASETS)
        self.per_class = QtWidgets.QSpinBox()
        self.per_class.setRange(0, 100_000)
        self.per_class.setToolTip("test samples per class (0: the whole split, DCASE only)")

        form = self._form = QtWidgets.QFormLayout()
        form.setFieldGrowthPolicy(QtWidgets.QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        form.addRow("Name", self.name)
        form.addRow("Voltage limit", self.limit)
        form.addRow(_rule("Device under test"))
        form.addRow("Kind", self.dut_kind)
        form.addRow("Port", self.dut_port)
        form.addRow("Baud", self.baud)
        form.addRow("Timestamps", self.mode)
        form.addRow(_rule("Energy monitor"))
        form.addRow("Driver", self.driver)
        form.addRow("Port / resource", self.emon_port)
        form.addRow("Supply voltage", self.voltage)
        form.addRow("Sample rate [Hz]", self.rate)
        form.addRow("Current range", self.current_range)
        form.addRow("PPK2 mode", self.ppk2_mode)
        form.addRow(_rule("Test set"))
        form.addRow("Dataset", self.dataset)
        form.addRow("Samples per class", self.per_class)

        self.save_button = QtWidgets.QPushButton("Save as TOML…")
        self.save_button.clicked.connect(self._ask_save)
        box = QtWidgets.QVBoxLayout(self)
        box.addWidget(self.choice)
        box.addWidget(self.where)
        box.addLayout(form)
        box.addWidget(self.save_button, 0, QtCore.Qt.AlignmentFlag.AlignRight)

        for edit in (self.name, _line_edit(self.dut_port), _line_edit(self.emon_port),
                     _line_edit(self.rate), _line_edit(self.current_range)):
            edit.textEdited.connect(self._edited)
        for combo in (self.dut_kind, self.mode, self.driver, self.dataset, self.current_range,
                      self.ppk2_mode):
            combo.activated.connect(self._edited)
        self.driver.currentTextChanged.connect(self._driver_changed)
        self._form.setRowVisible(self.ppk2_mode, False)  # until a PPK2 bench is chosen
        for spin in (self.baud, self.per_class):
            spin.valueChanged.connect(self._edited)
        self.limit.valueChanged.connect(self._limit_changed)
        self.voltage.valueChanged.connect(self._voltage_changed)
        self.fill_choices()

    # -- choosing -------------------------------------------------------------------------------
    def fill_choices(self) -> None:
        """The named benches (benches/), then open-a-file and new-bench entries."""
        self.choice.clear()
        taken: dict[str, Path] = {}
        for entry in bench_entries():  # ./benches, the lab's, the package's: the first of a name
            taken.setdefault(entry.name, entry.path)
        for name, path in taken.items():
            self.choice.addItem(name, path)
        self.choice.insertSeparator(self.choice.count())
        self.choice.addItem(OPEN_FILE)
        self.choice.addItem(NEW_BENCH)

    def _chosen(self, index: int) -> None:
        text = self.choice.itemText(index)
        if text == OPEN_FILE:
            path, _ = QtWidgets.QFileDialog.getOpenFileName(
                self, "Open a bench file", str(benches_dir()), "Bench files (*.toml)")
            if path:
                self.load(Path(path))
        elif text == NEW_BENCH:
            self.new()
        else:
            self.load(Path(self.choice.itemData(index)), label=text)

    def select(self, name: str) -> None:
        """Load a named bench (as if picked in the list)."""
        index = self.choice.findText(name)
        if index < 0:
            raise ConfigError(f"unknown bench {name!r}",
                              hint=f"known benches: {', '.join(known_devices())}")
        self.choice.setCurrentIndex(index)
        self._chosen(index)

    def load(self, path: Path, *, label: str | None = None) -> bool:
        """Read a bench file into the form; a bad file is a message, the form is cleared."""
        try:
            raw = read_toml(path, "bench file does not exist",
                            "pick another file, or a bench from the list")
            if not isinstance(raw.get("bench", {}), dict):
                raise ConfigError(f"{path}: bench: expected a table")
        except ConfigError as exc:
            self._set_raw({}, None, "")
            self.message.emit("error", exc.message, exc.hint)
            return False
        self._set_raw(raw, path, label or path.stem)
        self._show_choice(path)
        try:
            self.bench()
        except ConfigError as exc:  # readable TOML, wrong content: show it, let it be fixed
            self.message.emit("error", exc.message, exc.hint)
            return False
        self.message.emit("clear", "", "")
        return True

    def _show_choice(self, path: Path) -> None:
        """The list shows the file that is loaded (a file opened from elsewhere is added)."""
        for i in range(self.choice.count()):
            data = self.choice.itemData(i)
            if data is not None and Path(data).resolve() == path.resolve():
                self.choice.setCurrentIndex(i)
                return
        self.choice.insertItem(0, path.name, path)
        self.choice.setItemData(0, str(path), QtCore.Qt.ItemDataRole.ToolTipRole)
        self.choice.setCurrentIndex(0)

    def new(self) -> None:
        """An empty bench to fill from the detected devices."""
        self._set_raw(copy.deepcopy(NEW_RAW), None, "new bench")
        self.message.emit("info", "new bench: choose the DUT and monitor ports (see Devices), "
                          "then Save as TOML", "")

    def _set_raw(self, raw: dict[str, Any], path: Path | None, label: str) -> None:
        self._raw, self.path, self.label = raw, path, label
        self.where.setText(str(path) if path else ("(not saved)" if raw else "no bench"))
        bench, dut, emon = raw.get("bench", {}), raw.get("dut", {}), raw.get("emon", {})
        dataset = raw.get("dataset", {})
        self._loading = True
        try:
            self.name.setText(str(bench.get("name", path.stem if path else "")))
            limit = _float(bench.get("voltage_limit_v"), 3.3)
            self.limit.setValue(limit)
            self.voltage.setMaximum(self.limit.value())
            _set_combo(self.dut_kind, dut.get("kind", "mlperf-tiny"))
            _set_combo(self.dut_port, str(dut.get("port", VIRTUAL_PORT)))
            self.baud.setValue(int(dut.get("baud", 115200)))
            _set_combo(self.mode, dut.get("timestamp_mode", "energy"))
            _set_combo(self.driver, emon.get("driver", "lpm01a"))
            _set_combo(self.emon_port, str(emon.get("resource") or emon.get("port")
                                           or VIRTUAL_PORT))
            asked = _float(emon.get("supply_voltage_v"), 1.8)
            self.voltage_refused = asked if asked > limit else None
            self.voltage.setValue(min(asked, limit))
            _set_combo(self.rate, f"{_float(emon.get('sample_rate_hz'), 1000.0):g}")
            self._driver_changed(self.driver.currentText())
            _set_combo(self.current_range, str(emon.get("current_range", "auto")))
            _set_combo(self.ppk2_mode, str(emon.get("ppk2_mode", "source")))
            _set_combo(self.dataset, dataset.get("name", "synthetic-asc"))
            self.per_class.setValue(int(dataset.get("samples_per_class", 10)))
        except (TypeError, ValueError):
            pass  # a wrong type: parse_bench names it when the bench is validated
        finally:
            self._loading = False
        self._mark_voltage()
        self.setEnabled(True)
        self.changed.emit()

    # -- editing --------------------------------------------------------------------------------
    def _edited(self, *_args: object) -> None:
        if not self._loading:
            self.changed.emit()

    def _driver_changed(self, driver: str) -> None:
        """Offer the ranges this monitor takes (any amps in a span for the Keysights)."""
        text = self.current_range.currentText()
        choices = current_range_choices(driver) or ("auto",)
        self.current_range.blockSignals(True)
        self.current_range.clear()
        self.current_range.addItems(list(choices))
        self.current_range.setCurrentText(text if text and (
            text in choices or current_range_choices(driver) is None) else "auto")
        self.current_range.blockSignals(False)
        self.current_range.setToolTip(current_range_help(driver))
        # source or ampere mode is a PPK2's alone (the bench loader refuses it elsewhere)
        self._form.setRowVisible(self.ppk2_mode, _is_ppk2(driver))

    def _limit_changed(self, value: float) -> None:
        self.voltage.setMaximum(value)  # Qt clamps the supply down with it
        self._edited()

    def _voltage_changed(self, _value: float) -> None:
        if not self._loading:
            self.voltage_refused = None  # the user chose a voltage within the limit
            self._mark_voltage()
            self.changed.emit()

    def _mark_voltage(self) -> None:
        refused = self.voltage_refused is not None
        self.voltage.setStyleSheet("QDoubleSpinBox { background: #f8d7da; }" if refused else "")
        self.voltage.setToolTip(
            f"the file asks for {self.voltage_refused:g} V, above this bench's "
            f"{self.limit.value():g} V limit: choose a supply voltage" if refused
            else f"at most the bench's voltage limit ({self.limit.value():g} V)")

    def set_ports(self, ports: list[str]) -> None:
        """Offer detected serial ports in the port fields (keeping what is typed)."""
        for combo in (self.dut_port, self.emon_port):
            text = combo.currentText()
            combo.blockSignals(True)
            combo.clear()
            combo.addItems([VIRTUAL_PORT, *ports])
            combo.setCurrentText(text)
            combo.blockSignals(False)

    # -- the result -----------------------------------------------------------------------------
    def raw(self) -> dict[str, Any]:
        """The bench tables: the file's, with the form's values in."""
        raw = copy.deepcopy(self._raw)
        bench = raw.setdefault("bench", {})
        bench["name"] = self.name.text()
        bench["voltage_limit_v"] = self.limit.value()
        dut = raw.setdefault("dut", {})
        dut.update(kind=self.dut_kind.currentText(), port=self.dut_port.currentText().strip(),
                   baud=self.baud.value(), timestamp_mode=self.mode.currentText())
        emon = raw.setdefault("emon", {})
        driver = self.driver.currentText()
        emon["driver"] = driver
        emon.pop("resource", None)
        emon.pop("port", None)
        address = self.emon_port.currentText().strip()
        if driver.endswith(SIM_SUFFIX) or driver == "none":
            pass  # a simulated monitor lives on the virtual bench; "none" has no port
        elif address.upper().startswith(("USB", "TCPIP", "GPIB", "ASRL")):
            emon["resource"] = address
        else:
            emon["port"] = address
        emon["supply_voltage_v"] = self.voltage.value()
        emon["sample_rate_hz"] = _float(self.rate.currentText(), float("nan"))
        emon["current_range"] = self.current_range.currentText().strip() or "auto"
        if _is_ppk2(driver):
            emon["ppk2_mode"] = self.ppk2_mode.currentText()
        else:
            emon.pop("ppk2_mode", None)
        dataset = raw.setdefault("dataset", {})
        dataset["name"] = self.dataset.currentText()
        dataset["samples_per_class"] = self.per_class.value()
        return raw

    def bench(self) -> Bench:
        """The validated bench; ConfigError (naming the field) when the form is not valid."""
        if not self._raw:
            raise ConfigError("no bench chosen", hint="pick a bench from the list or open a file")
        if self.voltage_refused is not None:
            raise ConfigError(
                f"{self.path or 'the bench'}: [emon] supply_voltage_v {self.voltage_refused:g} "
                f"V is above the bench's voltage limit ({self.limit.value():g} V)",
                hint="choose a supply voltage within the limit in the form (it is not applied)")
        rate = _float(self.rate.currentText(), float("nan"))
        if not rate > 0:
            raise ConfigError(f"sample rate {self.rate.currentText()!r} is not a number of hertz",
                              hint="e.g. 1000")
        path = self.path or (benches_dir() / "unsaved.toml")
        return parse_bench(self.raw(), path)

    def device_label(self) -> str:
        """The short device name run folders are named after."""
        return self.label or (self.path.stem if self.path else "bench")

    def _ask_save(self) -> None:
        start = str(self.path.parent if self.path else benches_dir())
        path, _ = QtWidgets.QFileDialog.getSaveFileName(self, "Save the bench as", start,
                                                        "Bench files (*.toml)")
        if path:
            self.save(Path(path), overwrite=True)

    def save(self, path: Path, *, overwrite: bool = False) -> bool:
        """Validate and write the bench to `path`; it becomes the loaded file."""
        from rig.bench.saving import save_bench

        try:
            bench = self.bench()
            save_bench(bench, path, overwrite=overwrite)
        except ConfigError as exc:
            self.message.emit("error", exc.message, exc.hint)
            return False
        self.load(path)
        self.message.emit("info", f"bench saved: {path}", "")
        return True


def _spin(low: float, high: float, decimals: int, suffix: str) -> QtWidgets.QDoubleSpinBox:
    spin = QtWidgets.QDoubleSpinBox()
    spin.setRange(low, high)
    spin.setDecimals(decimals)
    spin.setSingleStep(0.1)
    spin.setSuffix(suffix)
    spin.setKeyboardTracking(False)
    return spin


def _combo(items: tuple[str, ...], *, editable: bool = False) -> QtWidgets.QComboBox:
    combo = QtWidgets.QComboBox()
    combo.addItems(list(items))
    combo.setEditable(editable)
    return combo


def _line_edit(combo: QtWidgets.QComboBox) -> QtWidgets.QLineEdit:
    """The line edit of an editable combo box."""
    edit = combo.lineEdit()
    assert edit is not None  # Qt gives every editable combo box one
    return edit


def _set_combo(combo: QtWidgets.QComboBox, text: str) -> None:
    if combo.findText(text) < 0:
        combo.addItem(text)
    combo.setCurrentText(text)


def _float(value: Any, default: float) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def _rule(text: str) -> QtWidgets.QLabel:
    label = QtWidgets.QLabel(f"<b>{text}</b>")
    label.setContentsMargins(0, 6, 0, 0)
    return label


def _is_ppk2(driver: str) -> bool:
    return driver in ("ppk2", f"ppk2{SIM_SUFFIX}")
